import type { Agent, Task, TaskStatus } from '@ffleet/shared';

export type ApiResponse<T = unknown> = { status: number; body: T; text: string };

const DONE: readonly TaskStatus[] = ['DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'];

/** A small fetch client for the ffleet REST API of a test cluster. */
export class ApiClient {
  constructor(readonly baseUrl: string) {}

  async request<T = unknown>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    const res = await fetch(this.baseUrl + path, {
      method,
      headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    let parsed: unknown = null;
    if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
    return { status: res.status, body: parsed as T, text };
  }

  get<T = unknown>(path: string) {
    return this.request<T>('GET', path);
  }
  post<T = unknown>(path: string, body?: unknown) {
    return this.request<T>('POST', path, body);
  }
  patch<T = unknown>(path: string, body?: unknown) {
    return this.request<T>('PATCH', path, body);
  }

  /** GET /health, or null while the control plane does not answer. */
  async health(): Promise<Record<string, unknown> | null> {
    try {
      const r = await this.get<Record<string, unknown>>('/health');
      return r.status === 200 ? r.body : null;
    } catch {
      return null;
    }
  }

  async createTask(body: Record<string, unknown>): Promise<Task> {
    const r = await this.post<Task>('/api/v1/tasks', body);
    if (r.status !== 201) throw new Error(`POST /tasks → ${r.status}: ${r.text}`);
    return r.body;
  }

  async getTask(id: string): Promise<Task> {
    const r = await this.get<Task>(`/api/v1/tasks/${id}`);
    if (r.status !== 200) throw new Error(`GET /tasks/${id} → ${r.status}: ${r.text}`);
    return r.body;
  }

  async taskLogs(id: string): Promise<string> {
    const r = await this.get(`/api/v1/tasks/${id}/logs`);
    if (r.status !== 200) throw new Error(`GET /tasks/${id}/logs → ${r.status}: ${r.text}`);
    return r.text;
  }

  async getAgent(name: string): Promise<Agent | null> {
    const r = await this.get<Agent>(`/api/v1/agents/${name}`);
    return r.status === 200 ? r.body : null;
  }

  /**
   * Poll a task until `until` holds (default: a DONE_* status). Transient failures (a restarting
   * control plane) are retried until the deadline; the error names the last state seen.
   */
  async waitForTask(
    id: string,
    until: (t: Task) => boolean = (t) => DONE.includes(t.status),
    timeoutMs = 60_000,
  ): Promise<Task> {
    const deadline = Date.now() + timeoutMs;
    let last: Task | string = 'no answer';
    for (;;) {
      try {
        const t = await this.getTask(id);
        last = t;
        if (until(t)) return t;
      } catch (err) {
        last = (err as Error).message;
      }
      if (Date.now() > deadline) {
        const seen =
          typeof last === 'string'
            ? last
            : `${last.status} attempt ${last.attempt} progress ${last.progress} error ${JSON.stringify(last.error)}`;
        throw new Error(`task ${id} did not reach the expected state within ${timeoutMs} ms (last: ${seen})`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
