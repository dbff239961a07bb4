CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`name` text NOT NULL,
	`key_hash` text NOT NULL,
	`mask_prefix` text NOT NULL,
	`mask_suffix` text NOT NULL,
	`value_length` integer NOT NULL,
	`created_by` text,
	`created_at` integer NOT NULL,
	`last_used` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_key_hash_unique` ON `api_keys` (`key_hash`);--> statement-breakpoint
CREATE INDEX `api_keys_team` ON `api_keys` (`team_id`);--> statement-breakpoint
CREATE TABLE `audit_events` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`at` integer NOT NULL,
	`team_id` text,
	`key_id` text,
	`action` text NOT NULL,
	`target` text,
	`detail` text
);
--> statement-breakpoint
CREATE INDEX `audit_team_at` ON `audit_events` (`team_id`,`at`);--> statement-breakpoint
CREATE TABLE `sandboxes` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`key_id` text NOT NULL,
	`template_id` text NOT NULL,
	`alias` text,
	`state` text NOT NULL,
	`phase` text NOT NULL,
	`metadata` text NOT NULL,
	`started_at` integer NOT NULL,
	`end_at` integer NOT NULL,
	`cpu_count` integer NOT NULL,
	`memory_mb` integer NOT NULL,
	`disk_size_mb` integer NOT NULL,
	`envd_version` text NOT NULL,
	`rev` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `sandboxes_team_started` ON `sandboxes` (`team_id`,`started_at`,`id`);--> statement-breakpoint
CREATE INDEX `sandboxes_key_started` ON `sandboxes` (`key_id`,`started_at`,`id`);--> statement-breakpoint
CREATE TABLE `snapshots` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`key_id` text NOT NULL,
	`sandbox_id` text NOT NULL,
	`names` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `snapshots_team` ON `snapshots` (`team_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `teams` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `teams_name_unique` ON `teams` (`name`);--> statement-breakpoint
CREATE TABLE `templates` (
	`team_id` text NOT NULL,
	`template_id` text NOT NULL,
	`public` integer DEFAULT false NOT NULL,
	`spec` text NOT NULL,
	`revision` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `template_id`)
);
--> statement-breakpoint
CREATE INDEX `templates_id` ON `templates` (`template_id`);