CREATE TABLE `traffic_policies` (
	`team` text NOT NULL,
	`name` text NOT NULL,
	`spec` text NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`team`, `name`)
);
