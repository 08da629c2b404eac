// An HTTP server on 127.0.0.1 that answers everything and records every request it gets: the
// outside world for sandbox tests, which prove that user code reaches it zero times.
import { createServer } from 'node:http';

export interface CountingServer {
  /** http://127.0.0.1:PORT/ */
  url: string;
  /** Request paths, in order of arrival. */
  requests: string[];
  close(): Promise<void>;
}

export async function countingServer(): Promise<CountingServer> {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(req.url ?? '');
    // Anything a caller might ask for works if it gets here: a module, a script, a CORS fetch.
    res.writeHead(200, { 'content-type': 'text/javascript', 'access-control-allow-origin': '*' });
    res.end('export default 1;');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('the counting server did not report a port');
  return {
    url: `http://127.0.0.1:${address.port}/`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
