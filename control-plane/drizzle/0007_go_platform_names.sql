-- 0.2.0 names an agent's os and arch as Go does (shared/src/platform/platform-names.ts); 0.1.0 used
-- Node's. Rewrite the os:/arch: items stored in requires to the names agents now offer, or those tasks
-- could never be claimed. Every task, whatever its status: a running one goes back to the queue when its
-- agent is lost, a finished one when it is restarted. Only exact items whose Go name differs change;
-- order is kept, and an item the rewrite makes a duplicate of an earlier one is dropped.
CREATE FUNCTION "ffleet_0007_go_platform_names"(items text[]) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(item ORDER BY ord), '{}'::text[]) FROM (
    SELECT item, ord,
      row_number() OVER same_item AS nth,
      bool_or(renamed) OVER (same_item ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS renamed_so_far
    FROM (
      SELECT coalesce(go, r.item) AS item, r.ord, go IS NOT NULL AS renamed
      FROM unnest(items) WITH ORDINALITY AS r(item, ord)
      LEFT JOIN (VALUES
        ('os:win32', 'os:windows'),
        ('os:sunos', 'os:solaris'),
        ('arch:x64', 'arch:amd64'),
        ('arch:ia32', 'arch:386'),
        ('arch:mipsel', 'arch:mipsle'),
        ('arch:ppc64', 'arch:ppc64le')
      ) AS names(node, go) ON names.node = r.item
    ) AS mapped
    WINDOW same_item AS (PARTITION BY item ORDER BY ord)
  ) AS numbered
  -- A repeat stays unless the rewrite made it one (duplicates written by a client are theirs).
  WHERE nth = 1 OR NOT renamed_so_far
$$;--> statement-breakpoint
UPDATE "tasks" SET "requires" = "ffleet_0007_go_platform_names"("requires")
  WHERE "requires" && '{os:win32,os:sunos,arch:x64,arch:ia32,arch:mipsel,arch:ppc64}'::text[];--> statement-breakpoint
UPDATE "presets" SET "requires" = "ffleet_0007_go_platform_names"("requires")
  WHERE "requires" && '{os:win32,os:sunos,arch:x64,arch:ia32,arch:mipsel,arch:ppc64}'::text[];--> statement-breakpoint
DROP FUNCTION "ffleet_0007_go_platform_names"(text[]);--> statement-breakpoint
-- Agents not yet reconnected keep what 0.1.0 reported until their next birth: the same names, so that
-- the check for tasks no known agent could run sees them offer what they will.
UPDATE "agents" SET
  "os" = CASE "os" WHEN 'win32' THEN 'windows' WHEN 'sunos' THEN 'solaris' ELSE "os" END,
  "arch" = CASE "arch" WHEN 'x64' THEN 'amd64' WHEN 'ia32' THEN '386' WHEN 'mipsel' THEN 'mipsle'
    WHEN 'ppc64' THEN 'ppc64le' ELSE "arch" END
  WHERE "os" IN ('win32', 'sunos') OR "arch" IN ('x64', 'ia32', 'mipsel', 'ppc64');
