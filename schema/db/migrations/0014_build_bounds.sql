ALTER TABLE `template_files` ADD `used_at` integer;--> statement-breakpoint
CREATE INDEX `template_builds_team_status` ON `template_builds` (`team_id`,`status`);