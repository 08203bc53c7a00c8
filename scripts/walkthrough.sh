#!/usr/bin/env bash
# The README's session walkthrough, runnable: creates a session with the demo client, hands it
# over as a browser would, reads /sessions/current with the cookie, deletes the session and shows
# the cookie is refused afterwards. Needs a running server (npm start) and the demo credentials:
#   export CASEBOOK_CLIENT_ID=demo-ehr CASEBOOK_CLIENT_SECRET=…   (printed by the first npm start)
set -euo pipefail
AUTH=${CASEBOOK_AUTH_URL:-http://localhost:8080/auth}
APP=${CASEBOOK_APP_URL:-http://localhost:8080/app}
: "${CASEBOOK_CLIENT_ID:?set CASEBOOK_CLIENT_ID (printed by the first npm start)}"
: "${CASEBOOK_CLIENT_SECRET:?set CASEBOOK_CLIENT_SECRET (printed by the first npm start)}"
json() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]))' "$1"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. The EHR backend creates a session (HTTP Basic client credentials)"
SESSION=$(curl -sS --fail-with-body -u "$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET" \
  -H 'Content-Type: application/json' "$AUTH/sessions" -d '{
    "scope": "user/*.read patient/*.read",
    "fhirContext": [
      { "type": "Practitioner", "identifier": { "system": "urn:demo:staff", "value": "dr-grey" },
        "role": "https://casebook.example/fhir/role/new" },
      { "type": "Patient", "identifier": { "system": "urn:demo:mrn", "value": "MRN-0001" },
        "role": "https://casebook.example/fhir/role/new" }
    ],
    "post_submit_redirect": "http://localhost:3000/report-done"
  }')
echo "$SESSION"
ID=$(echo "$SESSION" | json id)
TOKEN=$(echo "$SESSION" | json handover_token)

step "2. The browser is sent to the handover: 303 to next, with the auth_session cookie"
HEADERS=$(curl -sS -o /dev/null -D - -G "$AUTH/sessions/\$handover" \
  --data-urlencode "token=$TOKEN" --data-urlencode "next=$APP/external/v1?task=Task/1")
echo "$HEADERS" | grep -iE '^(HTTP|location|set-cookie)'
COOKIE=$(echo "$HEADERS" | grep -i '^set-cookie: auth_session=' | sed -E 's/^[Ss]et-[Cc]ookie: (auth_session=[^;]*).*/\1/')

step "3. The same token again: 401 (single use)"
curl -sS -G "$AUTH/sessions/\$handover" --data-urlencode "token=$TOKEN" --data-urlencode "next=$APP/" -w '\nHTTP %{http_code}\n'

step "4. The browser reads its session with the cookie"
curl -sS --fail-with-body -H "Cookie: $COOKIE" "$AUTH/sessions/current"; echo

step "5. The EHR backend reads the session, then deletes it (204)"
curl -sS --fail-with-body -u "$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET" "$AUTH/sessions/$ID"; echo
curl -sS --fail-with-body -u "$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET" -X DELETE "$AUTH/sessions/$ID" -w 'HTTP %{http_code}\n'

step "6. The cookie stops working at once: 401"
curl -sS -H "Cookie: $COOKIE" "$AUTH/sessions/current" -w '\nHTTP %{http_code}\n'

echo
echo "session $ID: see its events with  npm run casebook -- events export --stream session-$ID"
echo "(on the embedded store, stop the server first: one process owns ./data)"
