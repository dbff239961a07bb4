CREATE TABLE `freed_images` (
	`image` text PRIMARY KEY NOT NULL,
	`freed_at` integer NOT NULL
);
--> statement-breakpoint
-- A template write naming a freed image fails in the same statement (SQLite runs the trigger
-- inside it, and sqld serializes writes), so it cannot slip between a delete's claim and its free.
CREATE TRIGGER `templates_freed_image_insert` BEFORE INSERT ON `templates`
WHEN EXISTS (SELECT 1 FROM `freed_images` WHERE `image` = json_extract(NEW.`spec`, '$.image'))
BEGIN SELECT RAISE(ABORT, 'image_freed'); END;
--> statement-breakpoint
CREATE TRIGGER `templates_freed_image_update` BEFORE UPDATE OF `spec` ON `templates`
WHEN EXISTS (SELECT 1 FROM `freed_images` WHERE `image` = json_extract(NEW.`spec`, '$.image'))
BEGIN SELECT RAISE(ABORT, 'image_freed'); END;
