import type { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { problemBody } from './errors.ts';

/**
 * Requests Node's HTTP parser rejects before the app sees them (a URL or headers over Node's 16 KB
 * limit, a malformed request line, a request that took too long to arrive) are answered as problem+json
 * like every other error, instead of Node's bare status line with no body.
 */
export function answerClientErrors(server: EventEmitter): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // A response already under way, or a socket that cannot be written: nothing sensible to send.
    const current = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || current?.headersSent) {
      socket.destroy();
      return;
    }
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
  });
}
