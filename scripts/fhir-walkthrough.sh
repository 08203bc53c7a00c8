#!/usr/bin/env bash
# The README's FHIR data server walkthrough, runnable: registers a Patient, updates it
# conditionally, reads its _history, then shows a 409 (duplicate identifier) and a 403 (a session
# whose patient/ scope does not cover another patient) with their OperationOutcomes.
# Needs a running server (npm start) and the demo credentials (printed by the first npm start).
set -euo pipefail
AUTH=${CASEBOOK_AUTH_URL:-http://localhost:8080/auth}
FHIR=${CASEBOOK_FHIR_URL:-http://localhost:8080/fhir/r5}
APP=${CASEBOOK_APP_URL:-http://localhost:8080/app}
: "${CASEBOOK_CLIENT_ID:?set CASEBOOK_CLIENT_ID (printed by the first npm start)}"
: "${CASEBOOK_CLIENT_SECRET:?set CASEBOOK_CLIENT_SECRET (printed by the first npm start)}"
CLIENT="$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET"
MRN=${MRN:-MRN-$RANDOM$RANDOM}
json() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]))' "$1"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. Register a Patient (201, Location, ETag)"
CREATED=$(curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/fhir+json' "$FHIR/Patient" -D /dev/stderr -d '{
  "resourceType": "Patient",
  "identifier": [{ "system": "urn:demo:mrn", "value": "'"$MRN"'" }],
  "name": [{ "use": "official", "family": "Lovelace", "given": ["Ada"] }, { "family": "Byron" }],
  "gender": "female", "birthDate": "1815-12-10" }' 2> >(grep -iE '^(HTTP|location|etag)' >&2))
echo "$CREATED"
ID=$(echo "$CREATED" | json id)

step "2. Update it conditionally by identifier: identifiers are merged (200, version 2)"
curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/fhir+json' -X PUT \
  "$FHIR/Patient?identifier=urn:demo:mrn%7C$MRN" -d '{
  "resourceType": "Patient",
  "identifier": [{ "system": "urn:demo:insurance", "value": "INS-77" }],
  "birthDate": "1815-12-10" }'; echo

step "3. Its history: every version, from the event log"
curl -sS --fail-with-body -u "$CLIENT" "$FHIR/Patient/$ID/_history"; echo

step "4. The same identifier again: 409 duplicate, Location of the existing Patient"
curl -sS -u "$CLIENT" -H 'Content-Type: application/fhir+json' "$FHIR/Patient" -D /dev/stderr -w '\nHTTP %{http_code}\n' \
  -d '{ "resourceType": "Patient", "identifier": [{ "system": "urn:demo:mrn", "value": "'"$MRN"'" }] }' \
  2> >(grep -i '^location' >&2)

step "5. A session limited to another patient (patient/ scope) reads this one: 403 forbidden"
SESSION=$(curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/json' "$AUTH/sessions" -d '{
  "scope": "patient/*.read",
  "fhirContext": [
    { "type": "Practitioner", "identifier": { "system": "urn:demo:staff", "value": "dr-grey" },
      "role": "https://casebook.example/fhir/role/new" },
    { "type": "Patient", "identifier": { "system": "urn:demo:mrn", "value": "'"$MRN"'-other" },
      "role": "https://casebook.example/fhir/role/new" } ] }')
TOKEN=$(echo "$SESSION" | json handover_token)
COOKIE=$(curl -sS -o /dev/null -D - -G "$AUTH/sessions/\$handover" --data-urlencode "token=$TOKEN" \
  --data-urlencode "next=$APP/" | grep -i '^set-cookie: auth_session=' | sed -E 's/^[Ss]et-[Cc]ookie: (auth_session=[^;]*).*/\1/')
curl -sS -H "Cookie: $COOKIE" "$FHIR/Patient/$ID" -w '\nHTTP %{http_code}\n'
