// An OAuth 2.1 / OpenID Connect authorization server for the OAuth front-door
// tests: the certified `oidc-provider` package (panva), installed under
// tests/peers/node_modules. One process, memory adapter, no database.
//
//   node oidc_provider.mjs --port N --keys FILE
//
// Issuer http://127.0.0.1:N (discovery at /.well-known/openid-configuration
// and /.well-known/oauth-authorization-server, jwks_uri /jwks, authorization
// /auth, token /token, registration /reg; response type `code` only).
// Prints `listening http://127.0.0.1:N` on stdout when ready; exits 0 on
// SIGTERM or SIGINT.
//
// FILE is a private JWKS ({"keys": [...]}, RSA, each with kid, alg RS256,
// use sig). The first key signs; all are published at jwks_uri (restart with
// the new key first and the old one second to rotate). When FILE does not
// exist, one RSA-2048 key with a random kid is generated and written there,
// and its private key also as PKCS#8 PEM at FILE.<kid>.pem, so a test can
// sign tokens of its own with it.
//
// Access tokens are JWTs (header typ "at+jwt", RS256) for any resource
// indicator (RFC 8707) on http://127.0.0.1 or http://localhost: aud is the
// resource, scope the requested ones among "mcp:tools mcp:admin", 300 s.
// Without a `resource` parameter a token is opaque (not for toolhost).
//
// Clients:
//   - static, client_credentials only, client_secret_post or _basic:
//     player-one/one-secret, player-two/two-secret, lyra-tool/lyra-secret.
//     Their tokens have sub = client_id = the client's id.
//   - dynamic registration at /reg, open (no initial access token), as an MCP
//     SDK does it: application_type native (the SDK's default) may use http
//     redirect URIs on localhost/127.0.0.1/[::1]. PKCE S256 required of all.
//     Auth-code tokens have sub = the login name, client_id = the registered id.
//
// Login and consent are oidc-provider's development pages (devInteractions):
// GET /auth?... redirects to /interaction/UID, a form POSTing prompt=login,
// login=NAME, password=ANY to /interaction/UID; then the consent form POSTing
// prompt=consent there; then /auth/UID redirects to redirect_uri with code,
// state and iss (RFC 9207). The login name becomes the account id (sub).

import { createPrivateKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import Provider, { errors } from 'oidc-provider';

const { values: opts } = parseArgs({
  options: { port: { type: 'string' }, keys: { type: 'string' } },
});
if (!opts.port || !opts.keys) {
  console.error('usage: node oidc_provider.mjs --port N --keys FILE');
  process.exit(2);
}
const port = Number(opts.port);
const issuer = `http://127.0.0.1:${port}`;

function loadOrCreateKeys(file) {
  if (existsSync(file)) {
    return JSON.parse(readFileSync(file, 'utf8'));
  }
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const kid = randomBytes(8).toString('hex');
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
  const jwks = { keys: [jwk] };
  writeFileSync(file, JSON.stringify(jwks, null, 2), { mode: 0o600 });
  writeFileSync(`${file}.${kid}.pem`, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return jwks;
}

const jwks = loadOrCreateKeys(opts.keys);
for (const key of jwks.keys) {
  createPrivateKey({ key, format: 'jwk' }); // fail early on a bad key
}

const RESOURCE_SCOPE = 'mcp:tools mcp:admin';

function loopbackResource(indicator) {
  const url = URL.parse(indicator);
  return url !== null && url.protocol === 'http:' && ['127.0.0.1', 'localhost'].includes(url.hostname);
}

const staticClient = (clientId, secret) => ({
  client_id: clientId,
  client_secret: secret,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_post',
});

const provider = new Provider(issuer, {
  jwks,
  clients: [
    staticClient('player-one', 'one-secret'),
    staticClient('player-two', 'two-secret'),
    staticClient('lyra-tool', 'lyra-secret'),
  ],
  // A registering client's `scope` must name scopes listed here, and the MCP
  // SDK registers with the scopes it is about to ask for.
  scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  cookies: { keys: [randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  responseTypes: ['code'],
  // The static clients use either secret method; `none` is for public clients.
  clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'none'],
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // The resource the authorization request named, when it named one.
      defaultResource: async (ctx, client, oneOf) => oneOf,
      // A token request without `resource` gets the one granted.
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator) => {
        if (!loopbackResource(resourceIndicator)) {
          throw new errors.InvalidTarget();
        }
        return {
          scope: RESOURCE_SCOPE,
          audience: resourceIndicator,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
});

provider.on('server_error', (ctx, err) => console.error('oidc_provider: server_error', err));

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});

function stop() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
