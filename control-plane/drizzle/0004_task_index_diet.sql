DROP INDEX "tasks_agent_idx";--> statement-breakpoint
DROP INDEX "tasks_lease_idx";--> statement-breakpoint
DROP INDEX "tasks_batch_idx";--> statement-breakpoint
DROP INDEX "tasks_preset_idx";--> statement-breakpoint
DROP INDEX "tasks_watch_key_idx";--> statement-breakpoint
CREATE INDEX "tasks_batch_open_idx" ON "tasks" USING btree ("batch_id","created_at") WHERE batch_id IS NOT NULL AND status IN ('QUEUED','PRE_PROCESSING','RUNNING');--> statement-breakpoint
CREATE INDEX "tasks_batch_idx" ON "tasks" USING btree ("batch_id","created_at" DESC NULLS LAST) WHERE batch_id IS NOT NULL;--> statement-breakpoint
CREATE INDEX "tasks_preset_idx" ON "tasks" USING btree ("preset_id") WHERE preset_id IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "tasks_watch_key_idx" ON "tasks" USING btree ("watch_key") WHERE watch_key IS NOT NULL;--> statement-breakpoint
-- Room on each page for a row's next version, so progress reports and lease renewals (which now change
-- no indexed column) stay HOT updates on the same page. Applies to pages written from now on.
ALTER TABLE "tasks" SET (fillfactor = 90);
