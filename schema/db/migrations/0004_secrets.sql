CREATE TABLE `secret_versions` (
	`secret_id` text NOT NULL,
	`version` integer NOT NULL,
	`sealed` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`secret_id`, `version`)
);
--> statement-breakpoint
CREATE TABLE `secrets` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`name` text NOT NULL,
	`current_version` integer NOT NULL,
	`metadata` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `secrets_team_name` ON `secrets` (`team_id`,`name`);