/** HTTP errors with a stable `code`, mapped to problem+json in one onError. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    message: string,
    readonly errors?: { path: string; message: string }[],
  ) {
    super(message);
  }
}

export class NotFoundError extends HttpError {
  constructor(resource: string, id: string) {
    super(
      404,
      `${resource.toUpperCase()}_NOT_FOUND`,
      'Not Found',
      `${resource} ${JSON.stringify(id)} not found`,
    );
  }
}

export class ConflictError extends HttpError {
  /** `errors`: the fields the conflict is about (a taken name), for clients that mark them. */
  constructor(code: string, message: string, errors?: { path: string; message: string }[]) {
    super(409, code, 'Conflict', message, errors);
  }
}

export class ValidationError extends HttpError {
  constructor(message: string, errors: { path: string; message: string }[] = []) {
    super(422, 'VALIDATION_FAILED', 'Unprocessable Content', message, errors);
  }
}

export class BadRequestError extends HttpError {
  constructor(code: string, message: string, errors?: { path: string; message: string }[]) {
    super(400, code, 'Bad Request', message, errors);
  }
}

export class UnauthorizedError extends HttpError {
  constructor(message: string) {
    super(401, 'UNAUTHORIZED', 'Unauthorized', message);
  }
}

/** The problem+json body (RFC 9457) of an error; `code` is the stable machine-readable part. */
export function problemBody(
  status: number,
  title: string,
  code: string,
  detail: string,
  errors?: { path: string; message: string }[],
) {
  return {
    type: `https://ffleet.dev/problems/${code.toLowerCase().replace(/_/g, '-')}`,
    title,
    status,
    detail,
    code,
    ...(errors?.length ? { errors } : {}),
  };
}

/** Seconds a client is asked to wait before retrying a request the database could not serve. */
export const DATABASE_RETRY_AFTER_S = 5;
