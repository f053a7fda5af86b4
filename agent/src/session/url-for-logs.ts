/** A broker URL as logs show it: without `user:password@` (MQTT_URL may carry credentials). */
export function urlForLogs(url: string): string {
  try {
    const u = new URL(url);
    if (!u.username && !u.password) return url;
    u.username = '';
    u.password = '';
    return u.toString();
  } catch {
    return '[unparsable URL]';
  }
}
