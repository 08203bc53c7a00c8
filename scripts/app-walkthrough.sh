#!/usr/bin/env bash
# The README's application walkthrough: creates a draft Task for a patient and a session for a
# clinician, then prints the handover link to open in a browser. The browser lands in form
# selection; pick "Chest X-ray report", fill it in, submit, and the browser is sent to
# post_submit_redirect with ?response=QuestionnaireResponse/<id>&task=Task/<id>.
# Needs a running server (npm start) and the demo credentials (printed by the first npm start).
set -euo pipefail
AUTH=${CASEBOOK_AUTH_URL:-http://localhost:8080/auth}
FHIR=${CASEBOOK_FHIR_URL:-http://localhost:8080/fhir/r5}
APP=${CASEBOOK_APP_URL:-http://localhost:8080/app}
DONE=${POST_SUBMIT_REDIRECT:-http://localhost:3000/report-done}
: "${CASEBOOK_CLIENT_ID:?set CASEBOOK_CLIENT_ID (printed by the first npm start)}"
: "${CASEBOOK_CLIENT_SECRET:?set CASEBOOK_CLIENT_SECRET (printed by the first npm start)}"
CLIENT="$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET"
MRN=${MRN:-APP-$RANDOM$RANDOM}
json() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]))' "$1"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. The EHR registers the patient and a draft Task (the report to write)"
PATIENT=$(curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/fhir+json' "$FHIR/Patient" -d '{
  "resourceType": "Patient", "identifier": [{ "system": "urn:demo:mrn", "value": "'"$MRN"'" }],
  "name": [{ "family": "Lovelace", "given": ["Ada"] }], "gender": "female", "birthDate": "1815-12-10" }')
PATIENT_ID=$(echo "$PATIENT" | json id)
TASK=$(curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/fhir+json' "$FHIR/Task" -d '{
  "resourceType": "Task", "status": "draft", "intent": "order",
  "identifier": [{ "system": "urn:demo:order", "value": "'"$MRN"'-1" }],
  "for": { "reference": "Patient/'"$PATIENT_ID"'" } }')
TASK_ID=$(echo "$TASK" | json id)
echo "Patient/$PATIENT_ID, Task/$TASK_ID (draft)"

step "2. The EHR creates a session for the clinician, with the patient in context"
SESSION=$(curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/json' "$AUTH/sessions" -d '{
  "scope": "user/*.* patient/*.*", "patient": '"$PATIENT_ID"', "deployment_mode": "standalone",
  "fhirContext": [ { "type": "Practitioner", "identifier": { "system": "urn:demo:staff", "value": "dr-grey" },
                     "role": "https://casebook.example/fhir/role/new" } ],
  "post_submit_redirect": "'"$DONE"'" }')
TOKEN=$(echo "$SESSION" | json handover_token)

step "3. Open this link in a browser (valid for 5 minutes, once):"
NEXT="$APP/external/v1?task=Task/$TASK_ID"
HANDOVER=$(node -e 'const u=new URL(process.argv[1]);u.searchParams.set("token",process.argv[2]);u.searchParams.set("next",process.argv[3]);console.log(u.toString())' "$AUTH/sessions/\$handover" "$TOKEN" "$NEXT")
echo
echo "  $HANDOVER"
echo
echo "Pick \"Chest X-ray report\", fill it in and submit; the browser is then sent to"
echo "  $DONE?response=QuestionnaireResponse/<id>&task=Task/$TASK_ID"
