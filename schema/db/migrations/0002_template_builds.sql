CREATE TABLE `template_build_logs` (
	`build_id` text NOT NULL,
	`seq` integer NOT NULL,
	`at` integer NOT NULL,
	`level` text NOT NULL,
	`step` text,
	`message` text NOT NULL,
	PRIMARY KEY(`build_id`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `template_builds` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`team_name` text NOT NULL,
	`template_id` text NOT NULL,
	`cluster` text NOT NULL,
	`status` text NOT NULL,
	`cpu_count` integer NOT NULL,
	`memory_mb` integer NOT NULL,
	`tags` text NOT NULL,
	`start_cmd` text,
	`ready_cmd` text,
	`reason` text,
	`image` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`finished_at` integer
);
--> statement-breakpoint
CREATE INDEX `template_builds_team` ON `template_builds` (`team_id`,`template_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `template_files` (
	`team_id` text NOT NULL,
	`hash` text NOT NULL,
	`size` integer NOT NULL,
	`data` blob NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `hash`)
);
--> statement-breakpoint
CREATE TABLE `template_tags` (
	`team_id` text NOT NULL,
	`template_id` text NOT NULL,
	`tag` text NOT NULL,
	`build_id` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `template_id`, `tag`)
);
