CREATE INDEX `freed_images_cluster_sent` ON `freed_images` (`cluster`,`sent_at`);--> statement-breakpoint
CREATE INDEX `template_builds_base_image` ON `template_builds` (`base_image`);--> statement-breakpoint
CREATE INDEX `template_tags_build` ON `template_tags` (`build_id`);--> statement-breakpoint
CREATE INDEX `templates_image` ON `templates` (("spec" ->> '$.image'));