/**
 * The environment every test process starts with (mocha `require`, before any test file): the
 * key-encryption key that casebook processes the tests spawn on PostgreSQL need
 * (docs/architecture.md "Erasure"; a server on PostgreSQL refuses to start without one). A fixed
 * test key, so that processes started one after another open the same key store; never a real one.
 */
process.env.CASEBOOK_KEK ??= 'wbPn6jMPLOBvrD38rkCBmUH0bQ+Z+Sp2P6wALmFR60M=';
