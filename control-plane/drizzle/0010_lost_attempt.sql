ALTER TABLE "tasks" ADD COLUMN "lost_lease_token" text;--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "lost_attempt" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "lost_report_seq" integer DEFAULT -1 NOT NULL;