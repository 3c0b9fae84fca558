"""One session of the official MCP Python SDK against `orca mcp`, for mcp_clients.rs.

    python python_client.py ORCA ROOT CONFIG_HOME MODE HUMAN PLAN_JSON

MODE is the SDK's connect mode ("legacy": the initialize handshake; "2026-07-28": the
stateless revision, where an elicitation is an input_required round the SDK fulfils and
retries). HUMAN is "accept" or "decline": what the elicitation callback answers. PLAN_JSON is
a plan document to create.

It prints one JSON report on its last line (what it counted, the problems it found, the ids it
made); the Rust test asserts on it and on the project through the CLI. It never exits non-zero
for a defect of the server: a defect is a problem in the report, so the test shows them all.
"""

import asyncio
import importlib.metadata
import json
import re
import sys
import traceback

import jsonschema
import mcp
from mcp import Client, StdioServerParameters, types

orca, root, config_home, mode, human, plan_json = sys.argv[1:7]
report = {
    "sdk": importlib.metadata.version("mcp"),
    "mode": mode,
    "protocol": None,
    "tools_checked": 0,
    "with_output_schema": 0,
    "with_annotations": 0,
    "structured_checked": 0,
    "schema_violations": [],
    "problems": [],
    "asked": 0,
    "shown_digest": None,
    "plan_id": None,
    "approved": None,
    "answer_digest": None,
    "show_digest": None,
    "events_read": 0,
    "control_violations": 0,
}


def problem(text):
    report["problems"].append(text)


async def elicit(_context, params):
    report["asked"] += 1
    message = getattr(params, "message", "")
    found = re.search(r"Digest: (\S+)", message)
    report["shown_digest"] = found.group(1) if found else None
    if "say hello" not in message:
        problem(f"the question does not show the plan's step: {message!r}")
    schema = getattr(params, "requested_schema", None)
    if schema is None:
        problem(f"the question is not a form: {params!r}")
    if human == "accept":
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")


async def main():
    server = StdioServerParameters(
        command=orca,
        args=["--root", root, "mcp"],
        cwd=root,
        env={
            "NO_COLOR": "1",
            "XDG_CONFIG_HOME": config_home,
            "XDG_STATE_HOME": config_home + "/state",
        },
    )
    async with Client(
        server,
        mode=mode,
        elicitation_callback=elicit,
        client_info=types.Implementation(name="python-sdk-host", version="1.0"),
        read_timeout_seconds=120,
    ) as client:
        report["protocol"] = client.protocol_version
        listed = await client.list_tools()
        tools = {t.name: t for t in listed.tools}
        for tool in listed.tools:
            report["tools_checked"] += 1
            if tool.output_schema is None:
                problem(f"{tool.name}: no outputSchema")
            else:
                report["with_output_schema"] += 1
                try:
                    jsonschema.Draft202012Validator.check_schema(tool.output_schema)
                except jsonschema.SchemaError as e:
                    problem(f"{tool.name}: outputSchema is not a JSON Schema: {e.message}")
            if tool.annotations is None:
                problem(f"{tool.name}: no annotations")
            else:
                report["with_annotations"] += 1
            try:
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)
            except jsonschema.SchemaError as e:
                problem(f"{tool.name}: inputSchema is not a JSON Schema: {e.message}")

        # Control: the validator finds what is wrong in a made-up answer (a cursor as text, a
        # missing field), so no violation below means none, not a validator that checks nothing.
        watch_schema = tools["execution_watch"].output_schema if "execution_watch" in tools else {}
        bad = {"execution_id": "x", "next_cursor": "7"}
        report["control_violations"] = len(list(jsonschema.Draft202012Validator(watch_schema).iter_errors(bad)))

        async def call(name, args, expect_error=False):
            result = await client.call_tool(name, args)
            if result.is_error != expect_error:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                problem(f"{name} {json.dumps(args)}: is_error={result.is_error}: {text}")
                return None
            if expect_error:
                return result
            structured = result.structured_content
            if structured is None:
                problem(f"{name}: no structuredContent")
                return None
            texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
            if texts and json.loads(texts[0]) != structured:
                problem(f"{name}: structuredContent differs from the text block")
            schema = tools[name].output_schema if name in tools else None
            if schema is not None:
                report["structured_checked"] += 1
                for error in jsonschema.Draft202012Validator(schema).iter_errors(structured):
                    report["schema_violations"].append(f"{name}: {error.message}")
            return structured

        created = await call("plan_create", {"document": json.loads(plan_json)})
        if created is None:
            return
        plan = created.get("plan_id")
        report["plan_id"] = plan
        # The names every surface uses, and the old aliases.
        for args in ({"plan_id": plan}, {"plan": plan}):
            shown = await call("plan_show", args)
            if shown is not None and plan not in json.dumps(shown):
                problem(f"plan_show {args}: does not show {plan}")
        listed_plans = await call("plan_list", {})
        if listed_plans is not None and plan not in json.dumps(listed_plans):
            problem(f"plan_list does not list {plan}")
        await call("execution_list", {"plan_id": plan})
        await call("execution_list", {"plan": plan})
        # A wrong argument type is a tool error, not a crash.
        await call("plan_show", {"plan_id": 18}, expect_error=True)

        answer = await call("plan_ask_human", {"plan_id": plan})
        if answer is not None:
            report["approved"] = answer.get("approved")
            report["answer_digest"] = answer.get("digest")
        shown = await call("plan_show", {"plan_id": plan})
        if shown is not None:
            found = re.search(r'"digest": "([^"]+)"', json.dumps(shown))
            report["show_digest"] = found.group(1) if found else None

        if report["approved"]:
            ran = await call("plan_run", {"plan_id": plan})
            if ran is None:
                return
            execution = ran["execution_id"]
            cursor = 0
            for _ in range(60):
                # An integer cursor, then the old alias with a cursor of digits as text.
                watched = await call(
                    "execution_watch",
                    {"execution_id": execution, "cursor": cursor, "wait_seconds": 2},
                )
                if watched is None:
                    return
                report["events_read"] += len(watched["events"])
                if not isinstance(watched["next_cursor"], int):
                    problem(f"next_cursor is not an integer: {watched['next_cursor']!r}")
                    return
                cursor = watched["next_cursor"]
                if watched["ended"]:
                    report["stage"] = watched["stage"]
                    break
            await call("execution_watch", {"execution": execution, "cursor": str(cursor)})
            await call("execution_show", {"execution_id": execution})
            await call("step_output", {"execution_id": execution, "step_id": "hello"})
            await call("step_output", {"execution": execution, "step": "hello"})
            await call("execution_watch", {"execution_id": execution, "cursor": -1}, expect_error=True)


try:
    asyncio.run(main())
except BaseException:  # noqa: BLE001 - every failure is reported, not raised
    problem("the session failed: " + traceback.format_exc())
print(json.dumps(report))
