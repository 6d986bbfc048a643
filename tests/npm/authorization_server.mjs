// A real OAuth 2.1 / OpenID authorization server for the sign-in tests: the npm package
// oidc-provider (pinned in tests/npm), on loopback, with resource indicators (RFC 8707),
// dynamic client registration, introspection (RFC 7662) and revocation (RFC 7009). Its
// development login and consent pages are what a test's "browser" fills in.
//
// Usage: node authorization_server.mjs <port> <config.json>
// config: {"resources": {"<resource URI>": {"scope": "a b", "format": "jwt"|"opaque", "ttl": s}},
//          "clients": [...oidc-provider client metadata...], "scopes": [...],
//          "by_client": {"<client_id>": {"format": ..., "ttl": ...}}}   (overrides per client)
// Prints "listening <issuer>" once it accepts connections.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const [port, configPath] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, 'utf8'));
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: config.clients || [],
  scopes: ['openid', 'offline_access', ...(config.scopes || [])],
  claims: { openid: ['sub'] },
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource, client) => {
        const known = config.resources[resource];
        if (!known) throw new Provider.errors.InvalidTarget(`unknown resource ${resource}`);
        const server = { ...known, ...((config.by_client || {})[client.clientId] || {}) };
        return {
          scope: server.scope,
          audience: server.audience || resource,
          accessTokenTTL: server.ttl || 3600,
          accessTokenFormat: server.format || 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  pkce: { required: () => true },
  ttl: { AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL || 3600 },
});
provider.proxy = false;
// Public clients (the SDK registers itself with token_endpoint_auth_method=none) may use
// http://localhost redirect URIs in tests.
const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
