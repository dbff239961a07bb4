CREATE TABLE `clusters` (
	`name` text PRIMARY KEY NOT NULL,
	`first_linked_at` integer NOT NULL,
	`last_linked_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `update_ops_runs` (
	`team_id` text NOT NULL,
	`name` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `name`)
);
--> statement-breakpoint
CREATE INDEX `update_ops_runs_created` ON `update_ops_runs` (`created_at`);