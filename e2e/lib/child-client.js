// A socket.io client in its own process, for tests that SIGKILL it:
//   node lib/child-client.js <url> <token> <conversationId>
// Connects over websocket, joins the conversation, prints "joined" on
// stdout, then waits forever (until killed). Not a test file.

import { io } from 'socket.io-client';

const [url, token, conversationId] = process.argv.slice(2);
const socket = io(url, { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true, timeout: 10000 });

socket.on('connect_error', (err) => {
  process.stderr.write(`connect_error: ${err.message} ${JSON.stringify(err.data ?? null)}\n`);
  process.exit(2);
});
socket.on('connect', async () => {
  const res = await socket.timeout(5000).emitWithAck('conversation:join', { conversationId }).catch((err) => ({ timeout: err.message }));
  if (!res?.ok) {
    process.stderr.write(`join failed: ${JSON.stringify(res)}\n`);
    process.exit(3);
  }
  process.stdout.write('joined\n');
});
socket.on('disconnect', (reason) => process.stderr.write(`disconnect: ${reason}\n`));
setInterval(() => {}, 1 << 30);
