// A throwaway redis-server for integration tests: a free loopback port, no persistence, its
// files in a temporary folder; stop() ends it. Tests that need one fail with a clear message
// when Debian's redis-server is not installed (scripts/ installs it). redisCommand() sends
// one command (a minimal RESP2 client: tests poll state without starting a process).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { tempDir } from './server.mjs';

// The redis-server binary on PATH, or null.
export function redisServerBinary() {
  const dirs = (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/sbin', '/usr/local/bin']);
  for (const d of dirs) {
    const file = path.join(d || '.', 'redis-server');
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return file;
    } catch { /* next */ }
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Starts one and waits until it accepts connections: {host, port, address ("host:port"), proc,
// stop()}. Another process may take the free port first: then it tries another.
export async function startRedis() {
  const binary = redisServerBinary();
  if (!binary) throw new Error('redis-server is not installed (Debian package redis-server; scripts/ installs it)');
  const dir = tempDir();
  let log = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--daemonize', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
    log = '';
    const ready = await new Promise((resolve) => {
      const onData = (d) => {
        log += d;
        if (log.includes('Ready to accept connections')) resolve(true);
      };
      proc.stdout.on('data', onData);
      proc.stderr.on('data', onData);
      exited.then(() => resolve(false));
      setTimeout(() => resolve(false), 10000).unref();
    });
    if (!ready) {
      proc.kill('SIGKILL');
      await exited;
      continue;
    }
    // Never outlive the test process, whatever way it ends.
    const reap = () => proc.kill('SIGKILL');
    process.on('exit', reap);
    exited.then(() => process.off('exit', reap));
    return {
      host: '127.0.0.1', port, address: `127.0.0.1:${port}`, proc,
      async stop() {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      },
    };
  }
  throw new Error(`redis-server did not start:\n${log}`);
}

// Parses one RESP2 reply at buf[pos]: {value, end}, or null when buf holds only part of it.
// Errors become Error objects, nil becomes null, arrays arrays, bulk strings strings.
function parseReply(buf, pos) {
  const eol = buf.indexOf('\r\n', pos);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[pos]);
  const line = buf.subarray(pos + 1, eol).toString('utf8');
  const next = eol + 2;
  if (type === '+') return { value: line, end: next };
  if (type === '-') return { value: new Error(line), end: next };
  if (type === ':') return { value: Number(line), end: next };
  const n = Number(line);
  if (type === '$') {
    if (n < 0) return { value: null, end: next };
    if (buf.length < next + n + 2) return null;
    return { value: buf.subarray(next, next + n).toString('utf8'), end: next + n + 2 };
  }
  if (type === '*') {
    if (n < 0) return { value: null, end: next };
    const items = [];
    let at = next;
    for (let i = 0; i < n; i++) {
      const r = parseReply(buf, at);
      if (!r) return null;
      items.push(r.value);
      at = r.end;
    }
    return { value: items, end: at };
  }
  throw new Error(`unexpected RESP reply type '${type}'`);
}

// Sends one command to the redis at address ("host:port") and resolves to its reply.
export function redisCommand(address, ...args) {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host, port });
    let buf = Buffer.alloc(0);
    socket.on('error', reject);
    socket.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      let r;
      try {
        r = parseReply(buf, 0);
      } catch (e) {
        socket.destroy();
        reject(e);
        return;
      }
      if (!r) return;
      socket.end();
      if (r.value instanceof Error) reject(r.value);
      else resolve(r.value);
    });
    const parts = [`*${args.length}\r\n`];
    for (const a of args.map(String)) parts.push(`$${Buffer.byteLength(a)}\r\n${a}\r\n`);
    socket.write(parts.join(''));
  });
}
