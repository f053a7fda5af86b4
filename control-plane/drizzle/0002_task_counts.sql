CREATE TABLE "task_counts" (
	"status" text NOT NULL,
	"n" bigint NOT NULL
);
--> statement-breakpoint
CREATE FUNCTION "task_counts_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, n) SELECT status, count(*) FROM task_counts_rows GROUP BY status;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "task_counts_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, n) SELECT status, -count(*) FROM task_counts_rows GROUP BY status;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "task_counts_update"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, n) VALUES (OLD.status, -1), (NEW.status, 1);
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE FUNCTION "task_counts_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM task_counts;
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "tasks_count_insert" AFTER INSERT ON "tasks" REFERENCING NEW TABLE AS task_counts_rows
  FOR EACH STATEMENT EXECUTE FUNCTION "task_counts_insert"();--> statement-breakpoint
CREATE TRIGGER "tasks_count_delete" AFTER DELETE ON "tasks" REFERENCING OLD TABLE AS task_counts_rows
  FOR EACH STATEMENT EXECUTE FUNCTION "task_counts_delete"();--> statement-breakpoint
CREATE TRIGGER "tasks_count_update" AFTER UPDATE OF "status" ON "tasks"
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION "task_counts_update"();--> statement-breakpoint
CREATE TRIGGER "tasks_count_truncate" AFTER TRUNCATE ON "tasks"
  FOR EACH STATEMENT EXECUTE FUNCTION "task_counts_truncate"();--> statement-breakpoint
-- The triggers exist (and hold off concurrent writers until this commits): count what is there.
INSERT INTO "task_counts" ("status", "n") SELECT "status", count(*) FROM "tasks" GROUP BY "status";
