import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { secretKey, signPayload, verifySignature } from './signature.ts';

// Independent reference per the Standard Webhooks spec: HMAC-SHA256 over "id.timestamp.body", base64,
// with a `whsec_` secret base64-decoded to the key.
const reference = (key: Buffer, id: string, ts: number, body: string) =>
  `v1,${createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64')}`;

describe('webhook signatures', () => {
  const body = '{"id":"e1","event":"task.created","data":{"x":"é"}}';
  const ts = 1_700_000_000;

  it('signs a whsec_ secret with its base64-decoded key', () => {
    const key = Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    const secret = `whsec_${key.toString('base64')}`;
    expect(secretKey(secret)).toEqual(key);
    expect(signPayload({ secret, id: 'msg_1', timestamp: ts, body })).toBe(reference(key, 'msg_1', ts, body));
  });

  it('signs any other secret with its UTF-8 bytes', () => {
    const secret = 'plain sécret';
    expect(signPayload({ secret, id: 'e1', timestamp: ts, body })).toBe(
      reference(Buffer.from(secret, 'utf8'), 'e1', ts, body),
    );
  });

  it('matches the Standard Webhooks published test vector', () => {
    // From the standard-webhooks reference libraries' tests.
    const sig = signPayload({
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestamp: 1614265330,
      body: '{"test": 2432232314}',
    });
    expect(sig).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('verifies a valid signature among several and rejects tampering and stale timestamps', () => {
    const secret = 'whsec_c2VjcmV0LWtleQ==';
    const signature = `v1,Zm9v ${signPayload({ secret, id: 'e1', timestamp: ts, body })}`;
    const now = ts * 1000;
    expect(verifySignature({ secret, id: 'e1', timestamp: ts, body, signature, now })).toEqual({ ok: true });
    expect(verifySignature({ secret, id: 'e1', timestamp: ts, body: `${body} `, signature, now }).ok).toBe(
      false,
    );
    expect(verifySignature({ secret, id: 'e2', timestamp: ts, body, signature, now }).ok).toBe(false);
    expect(verifySignature({ secret: 'other', id: 'e1', timestamp: ts, body, signature, now }).ok).toBe(
      false,
    );
    expect(verifySignature({ secret, id: 'e1', timestamp: ts, body, signature, now: now + 600_000 })).toEqual(
      {
        ok: false,
        reason: 'timestamp outside tolerance',
      },
    );
    expect(verifySignature({ secret, id: 'e1', timestamp: 'x', body, signature, now }).ok).toBe(false);
  });
});
