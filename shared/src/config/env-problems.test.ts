import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { envError } from './env-problems.ts';

const Env = z.object({
  SLOTS: z.coerce.number().int().min(0).max(64).default(2),
  LEVEL: z.enum(['info', 'warn', '']).default('info'),
  AGENT_TOKEN: z.string().min(8, 'must be at least 8 characters').optional(),
  DATABASE_URL: z
    .string()
    .regex(/^postgres:\/\//, 'must be a postgres:// URL')
    .optional(),
  NAME: z
    .string()
    .min(3, 'at least 3 letters')
    .regex(/^[a-z]+$/, 'lower-case letters only')
    .optional(),
});

function refused(env: Record<string, string>) {
  const r = Env.safeParse(env);
  if (r.success) throw new Error('expected the environment to be refused');
  return envError(r.error, env);
}

describe('envError', () => {
  it('says which rule a number broke, with the value given', () => {
    expect(refused({ SLOTS: 'abc' })).toEqual({ variable: 'SLOTS', message: 'must be a number, got "abc"' });
    expect(refused({ SLOTS: '1.5' })).toEqual({
      variable: 'SLOTS',
      message: 'must be a whole number, got "1.5"',
    });
    expect(refused({ SLOTS: '-1' })).toEqual({ variable: 'SLOTS', message: 'must be at least 0, got "-1"' });
    expect(refused({ SLOTS: '65' })).toEqual({ variable: 'SLOTS', message: 'must be at most 64, got "65"' });
  });

  it('lists the allowed values of an enum, without the empty one that means unset', () => {
    expect(refused({ LEVEL: 'loud' })).toEqual({
      variable: 'LEVEL',
      message: 'must be one of info, warn, got "loud"',
    });
  });

  it("keeps the schema's own message, and names a variable once when it broke two rules", () => {
    expect(refused({ NAME: 'B1' })).toEqual({ variable: 'NAME', message: 'at least 3 letters, got "B1"' });
    expect(refused({ NAME: 'Box-1' })).toEqual({
      variable: 'NAME',
      message: 'lower-case letters only, got "Box-1"',
    });
  });

  it('never repeats the value of a token or a URL', () => {
    const found = refused({ AGENT_TOKEN: 'hunter2', DATABASE_URL: 'mysql://u:pw@db/x' });
    expect(found).toEqual({
      variable: 'AGENT_TOKEN',
      message: 'must be at least 8 characters; DATABASE_URL: must be a postgres:// URL',
    });
    expect(found.message).not.toMatch(/hunter2|pw@/);
  });

  it('names every invalid variable, the first as `variable`, and cuts a long value', () => {
    expect(refused({ SLOTS: 'x'.repeat(200), LEVEL: 'loud' })).toEqual({
      variable: 'SLOTS',
      message: `must be a number, got "${'x'.repeat(80)}…"; LEVEL: must be one of info, warn, got "loud"`,
    });
  });
});
