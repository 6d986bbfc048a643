// A real OAuth 2.1 / OpenID authorization server for the sign-in tests: the npm package
// oidc-provider (pinned in tests/npm), on loopback, with resource indicators (RFC 8707),
// dynamic client registration, introspection (RFC 7662) and revocation (RFC 7009). Its
// development login and consent pages are what a test's "browser" fills in.
//
// Usage: node authorization_server.mjs <port> <config.json>
// config: {"resources": {"<resource URI>": {"scope": "a b", "format": "jwt"|"opaque", "ttl": s}},
//          "clients": [...oidc-provider client metadata...], "scopes": [...],
//          "by_client": {"<client_id>": {"format": ..., "ttl": ...}},   (overrides per client)
//          "exchange": {"<client_id>": {"subject_audience": "<resource its subject tokens are for>",
//                                       "audience": "<aud minted instead of the one asked>"}}}
// Token exchange (RFC 8693), which oidc-provider does not implement, is registered below as a
// grant: the subject token (this provider's own access token: a JWT checked against its JWKS,
// or an opaque one looked up) must be active and meant for the exchanging client's resource;
// the token minted speaks for the same subject, for the requested resource.
// Prints "listening <issuer>" once it accepts connections.
import { readFileSync } from 'node:fs';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

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
        if (!known) throw new errors.InvalidTarget(`unknown resource ${resource}`);
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
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL || 3600,
    // Short-lived access tokens come with refresh tokens that outlive them.
    RefreshToken: 3600,
  },
});
provider.proxy = false;
provider.on('server_error', (_ctx, error) => console.error('server_error', error));

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const ownKeys = createRemoteJWKSet(new URL(`${issuer}/jwks`));

async function subjectOf(token) {
  // The subject token's holder and audience, or an error: this provider's token, still active.
  if (token.split('.').length === 3) {
    const { payload } = await jwtVerify(token, ownKeys, { issuer, typ: 'at+jwt' });
    return { sub: payload.sub, aud: [].concat(payload.aud || []), scope: payload.scope };
  }
  const found = await provider.AccessToken.find(token);
  if (!found || found.isExpired) throw new Error('inactive');
  return { sub: found.accountId, aud: [].concat(found.aud || []), scope: found.scope };
}

provider.registerGrantType(
  TOKEN_EXCHANGE,
  async (ctx) => {
    const { params, client } = ctx.oidc;
    const { InvalidGrant, InvalidRequest, InvalidTarget } = errors;
    if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
      throw new InvalidRequest('unsupported subject_token_type');
    }
    let subject;
    try {
      subject = await subjectOf(params.subject_token);
    } catch {
      throw new InvalidGrant('the subject token is not active');
    }
    if (!subject.sub) throw new InvalidGrant('the subject token speaks for no user');
    // The exchanging client (Manifold) may exchange only tokens issued for it as a resource:
    // config.exchange[client].subject_audience names that resource.
    const own = (config.exchange || {})[client.clientId] || {};
    if (!own.subject_audience || !subject.aud.includes(own.subject_audience)) {
      throw new InvalidGrant('the subject token was not issued for this client');
    }
    const resource = params.resource || params.audience;
    const known = config.resources[resource];
    if (!known) throw new InvalidTarget(`unknown resource ${resource}`);
    const audience = own.audience || resource; // a hostile provider's wrong audience, in tests
    const scope = (params.scope || known.scope || '').split(' ')
      .filter((s) => (known.scope || '').split(' ').includes(s)).join(' ') || undefined;
    const token = new provider.AccessToken({
      accountId: subject.sub,
      client,
      scope,
      gty: 'token-exchange',
    });
    token.resourceServer = {
      scope: known.scope,
      audience,
      accessTokenTTL: known.ttl || 3600,
      accessTokenFormat: 'jwt',
      jwt: { sign: { alg: 'RS256' } },
    };
    const value = await token.save();
    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS_TOKEN_TYPE,
      token_type: 'Bearer',
      expires_in: token.expiration,
      scope,
    };
  },
  ['subject_token', 'subject_token_type', 'requested_token_type', 'resource', 'audience', 'scope', 'actor_token', 'actor_token_type'],
);
// Public clients (the SDK registers itself with token_endpoint_auth_method=none) may use
// http://localhost redirect URIs in tests.
const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
