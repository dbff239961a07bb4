CREATE TABLE `template_file_uses` (
	`team_id` text NOT NULL,
	`hash` text NOT NULL,
	`bytes` integer NOT NULL,
	`used_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `hash`)
);
--> statement-breakpoint
CREATE INDEX `template_builds_team_status` ON `template_builds` (`team_id`,`status`);--> statement-breakpoint
-- Archives stored before this table: counted from their size, last used at their upload.
INSERT INTO `template_file_uses` (`team_id`, `hash`, `bytes`, `used_at`) SELECT `team_id`, `hash`, max(`size`, 4096), `created_at` FROM `template_files`;
