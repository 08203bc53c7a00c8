# casebook: one image for every role (serve, project, export, CLI). Configuration via environment
# variables (README.md "Configuration"); see docker-compose.yml for a Postgres + KurrentDB setup.
FROM node:20-bookworm-slim

ENV NODE_ENV=production \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false \
    PORT=8080

WORKDIR /app

# Dependencies first, so source changes reuse this layer. esbuild (which compiles the server) and
# tsx (which runs the CLI from the TypeScript sources) are runtime dependencies, so the dev tools
# (typescript, biome, mocha) can be left out.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force

COPY tsconfig.json ./
COPY src ./src
COPY scripts/copy-sql.mjs ./scripts/copy-sql.mjs
# What `npm start` builds before it serves, done once here (as root, before USER node: /app is not
# the node user's to write): the server runs compiled JavaScript (docs/architecture.md "Embedded
# start").
RUN npm run build

# Run as the image's unprivileged `node` user; ./data (DATA_DIR, the embedded PGlite store used
# when DATABASE_URL is unset) must be writable by it. Mount a volume there to keep it.
RUN mkdir -p /app/data && chown node:node /app/data
USER node

EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# node itself, not npm start: no build at start-up, and the container's SIGTERM reaches the server.
CMD ["node", "dist/cli/main.js", "serve"]
