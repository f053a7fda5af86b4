CREATE TABLE "agent_credentials" (
	"name" text PRIMARY KEY NOT NULL,
	"generation" integer NOT NULL,
	"rotated_at" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE INDEX "executions_delivery_idx" ON "webhook_executions" USING btree ("delivery_id");