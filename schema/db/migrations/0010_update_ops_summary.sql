ALTER TABLE `update_ops_runs` ADD `phase` text;--> statement-breakpoint
ALTER TABLE `update_ops_runs` ADD `replicas` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `update_ops_runs` ADD `updated_replicas` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `update_ops_runs` ADD `failed_replicas` integer DEFAULT 0 NOT NULL;