/**
 * Keys that occur more than once at the top level of one JSON log line. `JSON.parse` keeps the last
 * value of a repeated key silently, so a line is scanned as text: a pino child logger repeats a key its
 * parent already binds, and shippers that check (Elasticsearch's strict duplicate detection) refuse
 * such a line.
 */
export function repeatedKeys(line: string): string[] {
  const seen = new Set<string>();
  const repeated: string[] = [];
  let depth = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
    else if (c === '"') {
      const start = i;
      for (i++; i < line.length && line[i] !== '"'; i++) if (line[i] === '\\') i++;
      if (depth !== 1) continue;
      let next = i + 1;
      while (line[next] === ' ') next++;
      if (line[next] !== ':') continue;
      const key = JSON.parse(line.slice(start, i + 1)) as string;
      if (seen.has(key)) repeated.push(key);
      else seen.add(key);
    }
  }
  return repeated;
}
