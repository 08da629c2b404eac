// Error text for people. The adapter library's refusal ends with advice to its programmatic callers
// (an option of exportPeft) that no control in the app offers; the app says what a user can do.
export function userMessage(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof Error && e.name === 'UntrainedAdapterError') return message.replace(/;\s*pass force: true[^.]*\./, '; train it first (Train panel), then export it.');
  return message;
}
