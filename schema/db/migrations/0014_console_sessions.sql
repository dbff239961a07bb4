CREATE TABLE `console_sessions` (
	`id` text PRIMARY KEY NOT NULL,
	`key_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `console_sessions_expires` ON `console_sessions` (`expires_at`);--> statement-breakpoint
CREATE INDEX `console_sessions_key` ON `console_sessions` (`key_hash`,`created_at`);