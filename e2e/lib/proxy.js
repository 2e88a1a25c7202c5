// A small TCP proxy (node:net) that can be "frozen": it then drops every
// byte in both directions but keeps both TCP connections open, like a peer
// that vanished from the network without closing anything.

import net from 'node:net';

export async function startProxy(targetPort, { targetHost = '127.0.0.1', t } = {}) {
  const pairs = new Set();
  let frozen = false;

  const server = net.createServer((client) => {
    if (frozen) { client.destroy(); return; }
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream };
    pairs.add(pair);
    const pipe = (from, to) => {
      from.on('data', (chunk) => {
        if (!frozen && !to.destroyed) to.write(chunk);
      });
      // A close on one side is only passed on while not frozen: a frozen
      // link tells neither side anything.
      from.on('end', () => { if (!frozen) to.end(); });
      from.on('close', () => { if (!frozen) to.destroy(); });
      from.on('error', () => { /* reported through close */ });
    };
    pipe(client, upstream);
    pipe(upstream, client);
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });

  const proxy = {
    port: server.address().port,
    /** Connections whose two sockets are both still open. */
    get connections() {
      return [...pairs].filter(({ client, upstream }) => !client.destroyed && !upstream.destroyed).length;
    },
    /** Stop forwarding in both directions; keep every connection open. */
    freeze() { frozen = true; },
    /** Close the listener and destroy every connection. */
    async close() {
      frozen = true;
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
  t?.after(() => proxy.close());
  return proxy;
}
