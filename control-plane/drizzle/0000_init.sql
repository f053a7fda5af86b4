CREATE TABLE "agents" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"online" boolean DEFAULT false NOT NULL,
	"boot_id" text DEFAULT '' NOT NULL,
	"version" text DEFAULT '' NOT NULL,
	"protocol" integer DEFAULT 0 NOT NULL,
	"hostname" text DEFAULT '' NOT NULL,
	"os" text DEFAULT '' NOT NULL,
	"arch" text DEFAULT '' NOT NULL,
	"transcoder" jsonb,
	"transcoder_error" text DEFAULT '' NOT NULL,
	"encoders" text[] DEFAULT '{}'::text[] NOT NULL,
	"hwaccels" text[] DEFAULT '{}'::text[] NOT NULL,
	"reported_labels" text[] DEFAULT '{}'::text[] NOT NULL,
	"reported_slots" integer DEFAULT 0 NOT NULL,
	"labels_override" text[],
	"slots_override" integer,
	"paused" boolean DEFAULT false NOT NULL,
	"last_seen" bigint DEFAULT 0 NOT NULL,
	"connected_at" bigint DEFAULT 0 NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "batches" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text DEFAULT '' NOT NULL,
	"status" text DEFAULT 'RUNNING' NOT NULL,
	"task_count" integer DEFAULT 0 NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL,
	"finished_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "deliveries" (
	"id" uuid PRIMARY KEY NOT NULL,
	"event_id" uuid NOT NULL,
	"event" text NOT NULL,
	"webhook_id" uuid,
	"source" text NOT NULL,
	"url" text NOT NULL,
	"secret" text,
	"task_id" uuid,
	"progress_only" boolean DEFAULT false NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint DEFAULT 0 NOT NULL,
	"locked_until" bigint DEFAULT 0 NOT NULL,
	"last_error" text DEFAULT '' NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "events" (
	"id" uuid PRIMARY KEY NOT NULL,
	"event" text NOT NULL,
	"payload" jsonb NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "idempotency_keys" (
	"key" text NOT NULL,
	"route" text NOT NULL,
	"body_hash" text NOT NULL,
	"status" integer NOT NULL,
	"response" jsonb NOT NULL,
	"location" text,
	"created_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "presets" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"command" text NOT NULL,
	"output_file" text DEFAULT '' NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"pre_processing" jsonb,
	"post_processing" jsonb,
	"webhooks" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"requires" text[] DEFAULT '{}'::text[] NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "task_logs" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "task_logs_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"task_id" uuid NOT NULL,
	"attempt" integer NOT NULL,
	"step" text NOT NULL,
	"text" text NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "tasks" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"command_raw" text NOT NULL,
	"command_resolved" text DEFAULT '' NOT NULL,
	"input_raw" text DEFAULT '' NOT NULL,
	"input_resolved" text DEFAULT '' NOT NULL,
	"output_raw" text DEFAULT '' NOT NULL,
	"output_resolved" text DEFAULT '' NOT NULL,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"status" text NOT NULL,
	"progress" double precision DEFAULT 0 NOT NULL,
	"remaining" double precision DEFAULT 0 NOT NULL,
	"error" text DEFAULT '' NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"source" text DEFAULT 'api' NOT NULL,
	"pre_processing" jsonb,
	"post_processing" jsonb,
	"started_at" bigint DEFAULT 0 NOT NULL,
	"finished_at" bigint DEFAULT 0 NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL,
	"preset_id" uuid,
	"batch_id" uuid,
	"webhooks" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"requires" text[] DEFAULT '{}'::text[] NOT NULL,
	"attempt" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer DEFAULT 3 NOT NULL,
	"agent_id" uuid,
	"agent_name" text,
	"lease_token" text,
	"lease_expires_at" bigint DEFAULT 0 NOT NULL,
	"report_seq" integer DEFAULT -1 NOT NULL,
	"cancel_requested" boolean DEFAULT false NOT NULL,
	"watch_key" text,
	"watchfolder_id" uuid
);
--> statement-breakpoint
CREATE TABLE "watchfolders" (
	"id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"interval" integer NOT NULL,
	"growth_checks" integer NOT NULL,
	"preset_id" uuid NOT NULL,
	"path" text NOT NULL,
	"suspended" boolean DEFAULT false NOT NULL,
	"filter" jsonb DEFAULT '{"extensions":{"include":[],"exclude":[]}}'::jsonb NOT NULL,
	"agent" text,
	"assigned_agent_id" uuid,
	"last_check" bigint DEFAULT 0 NOT NULL,
	"error" text DEFAULT '' NOT NULL,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_executions" (
	"id" uuid PRIMARY KEY NOT NULL,
	"delivery_id" uuid NOT NULL,
	"webhook_id" uuid,
	"source" text NOT NULL,
	"event" text NOT NULL,
	"url" text NOT NULL,
	"attempt" integer NOT NULL,
	"request" jsonb NOT NULL,
	"response" jsonb,
	"error" text DEFAULT '' NOT NULL,
	"success" boolean NOT NULL,
	"duration_ms" integer NOT NULL,
	"task_id" uuid,
	"created_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhooks" (
	"id" uuid PRIMARY KEY NOT NULL,
	"event" text NOT NULL,
	"url" text NOT NULL,
	"secret" text,
	"created_at" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "agents_name_idx" ON "agents" USING btree ("name");--> statement-breakpoint
CREATE INDEX "batches_created_idx" ON "batches" USING btree ("created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "deliveries_due_idx" ON "deliveries" USING btree ("next_attempt_at") WHERE state = 'pending';--> statement-breakpoint
CREATE INDEX "deliveries_task_idx" ON "deliveries" USING btree ("task_id","url");--> statement-breakpoint
CREATE INDEX "events_created_idx" ON "events" USING btree ("created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "idempotency_route_key_idx" ON "idempotency_keys" USING btree ("route","key");--> statement-breakpoint
CREATE INDEX "presets_created_idx" ON "presets" USING btree ("created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "task_logs_task_idx" ON "task_logs" USING btree ("task_id","id");--> statement-breakpoint
CREATE INDEX "tasks_claim_idx" ON "tasks" USING btree ("status","priority" DESC NULLS LAST,"created_at","id");--> statement-breakpoint
CREATE INDEX "tasks_created_idx" ON "tasks" USING btree ("created_at" DESC NULLS LAST,"id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "tasks_status_created_idx" ON "tasks" USING btree ("status","created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "tasks_batch_idx" ON "tasks" USING btree ("batch_id","created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "tasks_preset_idx" ON "tasks" USING btree ("preset_id");--> statement-breakpoint
CREATE INDEX "tasks_agent_idx" ON "tasks" USING btree ("agent_id");--> statement-breakpoint
CREATE INDEX "tasks_source_idx" ON "tasks" USING btree ("source","created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "tasks_lease_idx" ON "tasks" USING btree ("lease_expires_at") WHERE status IN ('PRE_PROCESSING','RUNNING');--> statement-breakpoint
CREATE UNIQUE INDEX "tasks_watch_key_idx" ON "tasks" USING btree ("watch_key");--> statement-breakpoint
CREATE UNIQUE INDEX "watchfolders_name_idx" ON "watchfolders" USING btree ("name");--> statement-breakpoint
CREATE INDEX "watchfolders_created_idx" ON "watchfolders" USING btree ("created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "executions_created_idx" ON "webhook_executions" USING btree ("created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "executions_webhook_idx" ON "webhook_executions" USING btree ("webhook_id");--> statement-breakpoint
CREATE INDEX "executions_task_idx" ON "webhook_executions" USING btree ("task_id");--> statement-breakpoint
CREATE INDEX "webhooks_event_idx" ON "webhooks" USING btree ("event");--> statement-breakpoint
CREATE INDEX "webhooks_created_idx" ON "webhooks" USING btree ("created_at" DESC NULLS LAST);