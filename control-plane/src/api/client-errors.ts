import type { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { problemBody } from './errors.ts';

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
