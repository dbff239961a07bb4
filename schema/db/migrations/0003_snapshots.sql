ALTER TABLE `snapshots` ADD `name` text;--> statement-breakpoint
ALTER TABLE `snapshots` ADD `template_id` text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE `snapshots` ADD `cluster` text DEFAULT 'local' NOT NULL;--> statement-breakpoint
CREATE INDEX `snapshots_team_name` ON `snapshots` (`team_id`,`name`);