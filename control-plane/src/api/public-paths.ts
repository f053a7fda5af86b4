/**
 * Served without a token: the health check, the API reference (its page, its locally served assets,
 * the OpenAPI document) and the dashboard's page and files (/ui), which hold no data and no secret. A
 * browser cannot attach a bearer token when it opens a page, so with API tokens set these were
 * unreachable for the people they are for; the API requests they make (the reference's "try it", all
 * of the dashboard's) still need one.
 */
export const isPublicPath = (path: string): boolean =>
  path === '/health' ||
  path === '/' ||
  path === '/api/v1/openapi.json' ||
  path === '/api/v1/docs' ||
  path.startsWith('/api/v1/docs/') ||
  path === '/ui' ||
  path.startsWith('/ui/');
