import type { EventEmitter } from 'node:events';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { getRequestListener, RequestError } from '@hono/node-server';
import { problemBody } from './errors.ts';

/**
 * The API's HTTP server: `fetch` (the Hono app) behind Node's HTTP/1.1 server. Every request the app
 * never sees is still answered as problem+json: those Node's parser rejects (answerClientErrors), an
 * HTTP/1.1 request without `Host` (Node's own check answers with a bare 400, so it is off and done
 * here; HTTP/1.0, whose health checks often send none, is taken as for `hostname`), and those the
 * adapter cannot turn into a Request (an invalid `Host`, a backslash in the path).
 */
export function createApiServer(
  fetch: (req: Request) => Response | Promise<Response>,
  hostname: string,
): Server {
  const listener = getRequestListener(fetch, {
    hostname,
    errorHandler: (err) =>
      err instanceof RequestError
        ? problemResponse(400, 'Bad Request', 'MALFORMED_REQUEST', err.message.toLowerCase())
        : problemResponse(500, 'Internal Server Error', 'INTERNAL', 'the request could not be handled'),
  });
  const server = createServer({ requireHostHeader: false }, (req, res) => {
    if (!req.headers.host && req.httpVersion !== '1.0') {
      const body = JSON.stringify(
        problemBody(400, 'Bad Request', 'MALFORMED_REQUEST', 'an HTTP/1.1 request needs a Host header'),
      );
      res
        .writeHead(400, {
          'content-type': 'application/problem+json',
          'content-length': Buffer.byteLength(body),
          connection: 'close',
        })
        .end(body);
      return;
    }
    void listener(req, res);
  });
  answerClientErrors(server);
  return server;
}

function problemResponse(status: number, title: string, code: string, detail: string): Response {
  return new Response(JSON.stringify(problemBody(status, title, code, detail)), {
    status,
    headers: { 'content-type': 'application/problem+json' },
  });
}

/**
 * Requests Node's HTTP parser rejects before the app sees them (a URL or headers over Node's 16 KB
 * limit, a malformed request line, a request that took too long to arrive) are answered as problem+json
 * like every other error, instead of Node's bare status line with no body.
 */
export function answerClientErrors(server: EventEmitter): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // A response already on the wire cannot be followed by another: close.
    const current = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || current?.headersSent) {
      socket.destroy();
      return;
    }
    // The answer to an earlier request on the connection is still being made (pipelining): the client
    // gets it first, then this one, so a request that succeeded is not reported as failed.
    if (current && !current.writableFinished) {
      current.once('finish', () => answer(err, socket));
      current.once('close', () => {
        if (!current.writableFinished) socket.destroy();
      });
      return;
    }
    answer(err, socket);
  });
}

function answer(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (!socket.writable) return;
  const [status, title, code, detail] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [
          431,
          'Request Header Fields Too Large',
          'HEADERS_TOO_LARGE',
          'the URL and headers exceed 16 KB; send long input in a JSON body',
        ]
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request Timeout', 'REQUEST_TIMEOUT', 'the request did not arrive in time']
        : [400, 'Bad Request', 'MALFORMED_REQUEST', 'the request is not valid HTTP/1.1'];
  const body = JSON.stringify(problemBody(status, title, code, detail));
  socket.end(
    `HTTP/1.1 ${status} ${title}\r\nContent-Type: application/problem+json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
