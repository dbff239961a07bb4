ALTER TABLE `freed_images` ADD `cluster` text DEFAULT 'local' NOT NULL;--> statement-breakpoint
ALTER TABLE `freed_images` ADD `sent_at` integer;--> statement-breakpoint
ALTER TABLE `template_builds` ADD `base_image` text;