CREATE TABLE `team_clusters` (
	`team_id` text NOT NULL,
	`cluster` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`team_id`, `cluster`)
);
--> statement-breakpoint
CREATE INDEX `team_clusters_cluster` ON `team_clusters` (`cluster`);--> statement-breakpoint
-- Written by hand: every team starts bound to the clusters its templates run on, so nothing that runs today loses its cluster.
INSERT OR IGNORE INTO `team_clusters` (`team_id`, `cluster`, `created_at`) SELECT DISTINCT `team_id`, coalesce(json_extract(`spec`, '$.cluster'), 'local'), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) FROM `templates`;
