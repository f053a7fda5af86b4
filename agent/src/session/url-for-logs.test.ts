import { describe, expect, it } from 'vitest';
import { urlForLogs } from './url-for-logs.ts';

describe('urlForLogs', () => {
  it('leaves credentials out of a broker URL, and a URL without them as it is', () => {
    expect(urlForLogs('mqtt://u:S3CRET@broker.local:1883')).toBe('mqtt://broker.local:1883');
    expect(urlForLogs('mqtts://only-user@broker.local')).toBe('mqtts://broker.local');
    expect(urlForLogs('mqtt://127.0.0.1:1883')).toBe('mqtt://127.0.0.1:1883');
    expect(urlForLogs('not a url :S3CRET@')).toBe('[unparsable URL]');
  });
});
