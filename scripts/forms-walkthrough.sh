#!/usr/bin/env bash
# The README's form backend walkthrough, runnable: populates the demo Questionnaire for a Patient
# ($populate), validates a response with one missing required answer ($validate: one error), then
# turns the completed response into narrative text ($generate-narrative).
# Needs a running server (npm start) and the demo credentials (printed by the first npm start).
set -euo pipefail
FHIR=${CASEBOOK_FHIR_URL:-http://localhost:8080/fhir/r5}
: "${CASEBOOK_CLIENT_ID:?set CASEBOOK_CLIENT_ID (printed by the first npm start)}"
: "${CASEBOOK_CLIENT_SECRET:?set CASEBOOK_CLIENT_SECRET (printed by the first npm start)}"
CLIENT="$CASEBOOK_CLIENT_ID:$CASEBOOK_CLIENT_SECRET"
FORM=https://casebook.dev/fhir/Questionnaire/demo-chest-xray
post() { curl -sS --fail-with-body -u "$CLIENT" -H 'Content-Type: application/fhir+json' "$FHIR/$1" -d "$2"; }
# jsedit '<js expression over x>' < json: prints the expression's value as JSON (or text for strings).
jsedit() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const x=JSON.parse(s);const v=eval(process.argv[1]);console.log(typeof v==="string"?v:JSON.stringify(v))})' "$1"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. A Patient to report on"
PATIENT=$(post Patient '{ "resourceType": "Patient", "identifier": [{ "system": "urn:demo:mrn", "value": "FORMS-'"$RANDOM$RANDOM"'" }],
  "name": [{ "family": "Lovelace", "given": ["Ada"] }], "gender": "female", "birthDate": "1815-12-10" }')
echo "$PATIENT"

step "2. \$populate the demo Questionnaire for that Patient: name and date of birth are filled in"
POPULATED=$(post 'Questionnaire/$populate' '{ "resourceType": "Parameters", "parameter": [
  { "name": "canonical", "valueCanonical": "'"$FORM"'" },
  { "name": "context", "part": [ { "name": "name", "valueString": "subject" }, { "name": "content", "resource": '"$PATIENT"' } ] } ] }')
echo "$POPULATED"
RESPONSE=$(echo "$POPULATED" | jsedit 'x.parameter.find(p => p.name === "response").resource')

step "3. Answer two of the three required questions, mark it completed, \$validate: one error"
# (\$populate leaves out the optional "Findings" group, which it had nothing to fill in: add it.)
ANSWERED=$(echo "$RESPONSE" | jsedit '(() => {
  x.item.find(i => i.linkId === "indication").answer = [{ valueString: "Cough and fever for 5 days" }];
  x.item.splice(x.item.findIndex(i => i.linkId === "impression"), 0, { linkId: "findings", text: "Findings", item: [
    { linkId: "findings.lungs", text: "Lungs", answer: [{ valueCoding: { system: "https://casebook.dev/fhir/CodeSystem/demo", code: "consolidation", display: "Consolidation" } }] },
    { linkId: "findings.heart-enlarged", text: "Heart enlarged", answer: [{ valueBoolean: false }] },
    { linkId: "findings.other", text: "Other findings", answer: [{ valueString: "Small left pleural effusion.\nNo pneumothorax." }] } ] });
  return { ...x, status: "completed" };
})()')
post 'QuestionnaireResponse/$validate' "$ANSWERED"; echo

step "4. Answer the last one and \$validate again: valid"
COMPLETE=$(echo "$ANSWERED" | jsedit '(() => { x.item.find(i => i.linkId === "impression").answer = [{ valueString: "Right lower lobe pneumonia." }]; return x; })()')
post 'QuestionnaireResponse/$validate' "$COMPLETE"; echo

step "5. \$generate-narrative: the plain text a hospital system receives"
post 'QuestionnaireResponse/$generate-narrative' "$COMPLETE" | jsedit 'x.parameter.find(p => p.name === "text").valueString'
