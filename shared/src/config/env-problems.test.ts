import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { envProblems, joinEnvProblems } from './env-problems.ts';

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
    .regex(/^[a-z]+$/, 'lower-case letters only')
    .optional(),
});

function problems(env: Record<string, string>) {
  const r = Env.safeParse(env);
  if (r.success) throw new Error('expected the environment to be refused');
  return envProblems(r.error, env);
}

describe('envProblems', () => {
  it('says which rule a number broke, with the value given', () => {
    expect(problems({ SLOTS: 'abc' })).toEqual([
      { variable: 'SLOTS', message: 'must be a number, got "abc"' },
    ]);
    expect(problems({ SLOTS: '1.5' })).toEqual([
      { variable: 'SLOTS', message: 'must be a whole number, got "1.5"' },
    ]);
    expect(problems({ SLOTS: '-1' })).toEqual([
      { variable: 'SLOTS', message: 'must be at least 0, got "-1"' },
    ]);
    expect(problems({ SLOTS: '65' })).toEqual([
      { variable: 'SLOTS', message: 'must be at most 64, got "65"' },
    ]);
  });

  it('lists the allowed values of an enum, without the empty one that means unset', () => {
    expect(problems({ LEVEL: 'loud' })).toEqual([
      { variable: 'LEVEL', message: 'must be one of info, warn, got "loud"' },
    ]);
  });

  it("keeps the schema's own message", () => {
    expect(problems({ NAME: 'Box-1' })).toEqual([
      { variable: 'NAME', message: 'lower-case letters only, got "Box-1"' },
    ]);
  });

  it('never repeats the value of a token or a URL', () => {
    const found = problems({ AGENT_TOKEN: 'hunter2', DATABASE_URL: 'mysql://u:pw@db/x' });
    expect(found).toEqual([
      { variable: 'AGENT_TOKEN', message: 'must be at least 8 characters' },
      { variable: 'DATABASE_URL', message: 'must be a postgres:// URL' },
    ]);
    expect(JSON.stringify(found)).not.toMatch(/hunter2|pw@/);
  });

  it('names every invalid variable once, and cuts a long value', () => {
    const found = problems({ SLOTS: 'x'.repeat(200), LEVEL: 'loud' });
    expect(found.map((p) => p.variable)).toEqual(['SLOTS', 'LEVEL']);
    expect(found[0]!.message).toBe(`must be a number, got "${'x'.repeat(80)}…"`);
  });
});

describe('joinEnvProblems', () => {
  it('keeps the first variable and names the others in the message', () => {
    expect(
      joinEnvProblems([
        { variable: 'A', message: 'must be a number' },
        { variable: 'B', message: 'must be one of x, y' },
      ]),
    ).toEqual({ variable: 'A', message: 'must be a number; B: must be one of x, y' });
  });
});
