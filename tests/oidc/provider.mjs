// A real OpenID provider for tests/tests/oauth.rs: panva's oidc-provider (pinned in package.json)
// on 127.0.0.1:PORT, issuer http://127.0.0.1:PORT, with two clients of the client-credentials
// grant and resource indicators (RFC 8707): an access token asked for a resource is a JWT
// (RS256) whose audience is that resource.
//
//   node provider.mjs PORT KEYS_FILE [--rotate]
//
// - Clients: `rho-tests` / `rho-tests-secret` may get scope `tools:call`; `rho-admin` /
//   `rho-admin-secret` may get `tools:call tools:admin`. Tokens live 300 s.
// - Keys: the private RSA keys are kept in KEYS_FILE (made on the first start), so a restart on
//   the same port is the same issuer; `--rotate` puts a new key first, which signs from then on
//   while the old one stays published (a rotation).
// - `GET /_test/stats`: `{"jwks_fetches": N}`, the key set's fetches since start.
// - `POST /_test/mint` `{"claims": {...}, "key": "provider" | "foreign" | "none" | "hs256-public",
//   "kid": "..."}`: a token of those claims signed as asked — by the provider's signing key, by a
//   key it never published, unsigned (`alg: none`), or HS256 with the provider's public key (PEM)
//   as the secret — for the cases a resource server must refuse.
//
// Prints `listening http://127.0.0.1:PORT` on stdout once it serves.
import { createHmac, randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import * as jose from 'jose';
import Provider from 'oidc-provider';

const [port, keysFile, ...flags] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

async function newKey() {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

let keys = existsSync(keysFile) ? JSON.parse(readFileSync(keysFile, 'utf8')) : [await newKey()];
if (flags.includes('--rotate')) keys = [await newKey(), ...keys];
writeFileSync(keysFile, JSON.stringify(keys), { mode: 0o600 });

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'rho-tests',
      client_secret: 'rho-tests-secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      scope: 'tools:call',
    },
    {
      client_id: 'rho-admin',
      client_secret: 'rho-admin-secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      scope: 'tools:call tools:admin',
    },
  ],
  jwks: { keys },
  scopes: ['tools:call', 'tools:admin'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      getResourceServerInfo: (_ctx, resource) => ({
        scope: 'tools:call tools:admin',
        audience: resource,
        accessTokenTTL: 300,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
});

let jwksFetches = 0;
provider.use(async (ctx, next) => {
  if (ctx.path === '/jwks') jwksFetches += 1;
  if (ctx.path === '/_test/stats') {
    ctx.body = { jwks_fetches: jwksFetches };
    return;
  }
  if (ctx.path === '/_test/mint' && ctx.method === 'POST') {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    const { claims, key, kid } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    ctx.body = await mint(claims, key, kid);
    return;
  }
  await next();
});

async function mint(claims, key, kid) {
  const signing = keys[0];
  const header = { typ: 'at+jwt', kid: kid ?? signing.kid };
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  switch (key) {
    case 'provider':
      return new jose.SignJWT(claims)
        .setProtectedHeader({ ...header, alg: 'RS256' })
        .sign(await jose.importJWK(signing, 'RS256'));
    case 'foreign':
      return new jose.SignJWT(claims)
        .setProtectedHeader({ ...header, alg: 'RS256' })
        .sign(await jose.importJWK(await newKey(), 'RS256'));
    case 'none':
      return `${b64({ ...header, alg: 'none' })}.${b64(claims)}.`;
    case 'hs256-public': {
      const { d, p, q, dp, dq, qi, ...publicJwk } = signing;
      const publicKey = await jose.importJWK(publicJwk, 'RS256');
      const pem = await jose.exportSPKI(publicKey);
      const input = `${b64({ ...header, alg: 'HS256' })}.${b64(claims)}`;
      return `${input}.${createHmac('sha256', pem).update(input).digest('base64url')}`;
    }
    default:
      throw new Error(`no key ${key}`);
  }
}

provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
