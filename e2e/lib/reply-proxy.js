// A TCP proxy (node:net) that can lose replies: while `dropReplies` is on,
// every byte from the target back to the client is discarded, while the
// client's bytes still reach the target. Put between a presenced node and
// Redis, it makes commands run on Redis whose replies never arrive (the
// node sees a timeout after the command took effect).

import net from 'node:net';

export async function startReplyProxy(targetPort, { targetHost = '127.0.0.1', t } = {}) {
  const pairs = new Set();
  let dropping = false;
  let dropped = 0;

  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream };
    pairs.add(pair);
    client.on('data', (chunk) => { if (!upstream.destroyed) upstream.write(chunk); });
    upstream.on('data', (chunk) => {
      if (dropping) { dropped += chunk.length; return; }
      if (!client.destroyed) client.write(chunk);
    });
    const close = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', close);
    upstream.on('close', close);
    client.on('error', () => {});
    upstream.on('error', () => {});
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });

  const proxy = {
    port: server.address().port,
    get connections() { return pairs.size; },
    get droppedBytes() { return dropped; },
    dropReplies(on) { dropping = on; },
    async close() {
      for (const { client, upstream } of pairs) { client.destroy(); upstream.destroy(); }
      pairs.clear();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
  t?.after(() => proxy.close());
  return proxy;
}
