DROP INDEX "deliveries_pending_target_idx";--> statement-breakpoint
DROP INDEX "deliveries_progress_sent_idx";--> statement-breakpoint
ALTER TABLE "deliveries" ADD COLUMN "seq" bigint NOT NULL GENERATED ALWAYS AS IDENTITY (sequence name "deliveries_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1);--> statement-breakpoint
CREATE INDEX "deliveries_pending_target_idx" ON "deliveries" USING btree ("task_id","url","seq") WHERE state = 'pending';--> statement-breakpoint
CREATE INDEX "deliveries_progress_sent_idx" ON "deliveries" USING btree ("task_id","url","updated_at") WHERE progress_only AND attempts > 0;--> statement-breakpoint
UPDATE "deliveries" SET "secret" = NULL WHERE "webhook_id" IS NOT NULL;
