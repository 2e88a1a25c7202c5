// Minting JSON Web Tokens with node:crypto, including deliberately bad ones.

import { createHmac } from 'node:crypto';

const HASHES = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' };

export function b64url(data) {
  return Buffer.from(typeof data === 'string' ? data : JSON.stringify(data)).toString('base64url');
}

/** Seconds since the epoch. */
export function nowSec() {
  return Math.floor(Date.now() / 1000);
}

/**
 * Signs payload as a JWT.
 *   alg     HS256 (default), HS384, HS512, or "none" (empty signature)
 *   header  the full header object (default {alg, typ: "JWT"})
 */
export function signJwt(payload, secret, { alg = 'HS256', header } = {}) {
  const h = header ?? { alg, typ: 'JWT' };
  const signingInput = `${b64url(h)}.${b64url(payload)}`;
  if (alg === 'none') return `${signingInput}.`;
  const hash = HASHES[alg];
  if (!hash) throw new Error(`unsupported alg ${alg}`);
  return `${signingInput}.${createHmac(hash, secret).update(signingInput).digest('base64url')}`;
}

/** A valid HS256 token for sub, valid one hour; extra claims override. */
export function tokenFor(sub, secret, extra = {}) {
  const now = nowSec();
  return signJwt({ sub, iat: now, exp: now + 3600, ...extra }, secret);
}

/**
 * A correctly signed HS256 token whose total length is at least `bytes`
 * (and at most bytes + 3): padded with a filler claim.
 */
export function bigToken(sub, secret, bytes) {
  for (let pad = Math.max(0, Math.floor(bytes * 0.75) - 200); ; pad++) {
    const tok = tokenFor(sub, secret, { pad: 'x'.repeat(pad) });
    if (tok.length >= bytes) return tok;
  }
}
