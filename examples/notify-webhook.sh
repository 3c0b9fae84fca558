#!/bin/sh
# orca notifier: posts each pending decision to a webhook (Slack, Mattermost, Discord, ntfy,
# or anything that takes a JSON POST). orca serve runs it with the notification as JSON on
# stdin, when a plan waits for approval or a step waits for a decision.
#
# In .orca/config.toml:
#   [notify]
#   command = "ORCA_WEBHOOK_URL=https://hooks.example/T000/B000 sh examples/notify-webhook.sh"
#   timeout_secs = 10
#
# What it sends: {"text": "<headline> <link>"} (Slack-style), plus the whole notification
# under "orca". A failure here is logged by orca serve and never blocks or fails a run.
set -eu
: "${ORCA_WEBHOOK_URL:?set ORCA_WEBHOOK_URL to the webhook address}"
payload=$(cat)
# The headline and the link, read without jq (not everywhere); the JSON is orca's own.
headline=$(printf '%s' "$payload" | sed -n 's/.*"headline":"\([^"]*\)".*/\1/p')
url=$(printf '%s' "$payload" | sed -n 's/.*"url":"\([^"]*\)".*/\1/p')
body=$(printf '{"text":"orca: %s %s","orca":%s}' "$headline" "$url" "$payload")
exec curl --silent --show-error --fail --max-time 8 \
  -H 'Content-Type: application/json' --data-binary "$body" "$ORCA_WEBHOOK_URL"
