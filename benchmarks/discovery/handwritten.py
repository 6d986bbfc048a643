"""Hand-written catalogs for the discovery evaluation, modelled on the kind of tools public MCP
servers for GitHub, Slack, PostgreSQL, Google Drive, Kubernetes and Sentry offer.

They are **written for this benchmark, not dumped from those servers**: names, descriptions and
arguments are in the usual style of such servers, so that the search is measured on a catalog
of realistic size and overlap (several servers that all "list", "get", "create", "search").
``python -m benchmarks.discovery.handwritten`` rewrites ``catalogs/<name>.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "catalogs"

Arg = tuple[str, str, str]  # name, JSON type, description


def tool(name: str, description: str, *args: Arg, required: tuple[str, ...] = ()) -> dict[str, Any]:
    properties = {arg: {"type": kind, "description": text} for arg, kind, text in args}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return {"name": name, "description": description, "inputSchema": schema}


OWNER: Arg = ("owner", "string", "Repository owner (user or organization)")
REPO: Arg = ("repo", "string", "Repository name")
PAGE: Arg = ("page", "number", "Page number for pagination (min 1)")
PER_PAGE: Arg = ("perPage", "number", "Results per page (min 1, max 100)")
ISSUE: Arg = ("issue_number", "number", "The number of the issue")
PR: Arg = ("pullNumber", "number", "Pull request number")
R = ("owner", "repo")

GITHUB = [
    tool(
        "create_issue",
        "Create a new issue in a GitHub repository.",
        OWNER,
        REPO,
        ("title", "string", "Issue title"),
        ("body", "string", "Issue body content"),
        ("assignees", "array", "Usernames to assign to this issue"),
        ("labels", "array", "Labels to apply"),
        required=(*R, "title"),
    ),
    tool(
        "get_issue",
        "Get details of a specific issue in a GitHub repository.",
        OWNER,
        REPO,
        ISSUE,
        required=(*R, "issue_number"),
    ),
    tool(
        "list_issues",
        "List issues in a GitHub repository. For pagination, use the 'endCursor' from the previous response.",
        OWNER,
        REPO,
        ("state", "string", "Filter by state: OPEN, CLOSED"),
        ("labels", "array", "Filter by labels"),
        ("since", "string", "Filter by date (ISO 8601 timestamp)"),
        PER_PAGE,
        required=R,
    ),
    tool(
        "update_issue",
        "Update an existing issue in a GitHub repository: title, body, state, labels, "
        "assignees or milestone.",
        OWNER,
        REPO,
        ISSUE,
        ("title", "string", "New title"),
        ("body", "string", "New description"),
        ("state", "string", "New state: open or closed"),
        ("labels", "array", "New labels"),
        required=(*R, "issue_number"),
    ),
    tool(
        "add_issue_comment",
        "Add a comment to a specific issue in a GitHub repository.",
        OWNER,
        REPO,
        ISSUE,
        ("body", "string", "Comment content"),
        required=(*R, "issue_number", "body"),
    ),
    tool(
        "search_issues",
        "Search for issues in GitHub repositories using issues search syntax already scoped to is:issue.",
        ("query", "string", "Search query using GitHub issues search syntax"),
        ("sort", "string", "Sort field by number of matches of categories"),
        ("order", "string", "Sort order"),
        PAGE,
        PER_PAGE,
        required=("query",),
    ),
    tool(
        "create_pull_request",
        "Create a new pull request in a GitHub repository.",
        OWNER,
        REPO,
        ("title", "string", "PR title"),
        ("body", "string", "PR description"),
        ("head", "string", "Branch containing changes"),
        ("base", "string", "Branch to merge into"),
        ("draft", "boolean", "Create as draft PR"),
        required=(*R, "title", "head", "base"),
    ),
    tool(
        "get_pull_request",
        "Get details of a specific pull request in a GitHub repository.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "list_pull_requests",
        "List pull requests in a GitHub repository.",
        OWNER,
        REPO,
        ("state", "string", "Filter by state"),
        ("head", "string", "Filter by head user/org and branch"),
        ("base", "string", "Filter by base branch"),
        PAGE,
        PER_PAGE,
        required=R,
    ),
    tool(
        "merge_pull_request",
        "Merge a pull request in a GitHub repository.",
        OWNER,
        REPO,
        PR,
        ("commit_title", "string", "Title for merge commit"),
        ("merge_method", "string", "Merge method: merge, squash or rebase"),
        required=(*R, "pullNumber"),
    ),
    tool(
        "get_pull_request_diff",
        "Get the diff of a pull request.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "get_pull_request_files",
        "Get the files changed in a specific pull request.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "get_pull_request_status",
        "Get the status of all status checks for a pull request.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "create_pull_request_review",
        "Create a review on a pull request: approve, request changes or comment.",
        OWNER,
        REPO,
        PR,
        ("body", "string", "Review comment text"),
        ("event", "string", "Review action to perform: APPROVE, REQUEST_CHANGES, COMMENT"),
        required=(*R, "pullNumber", "event"),
    ),
    tool(
        "request_copilot_review",
        "Request a GitHub Copilot code review for a pull request.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "update_pull_request_branch",
        "Update the branch of a pull request with the latest changes from the base branch.",
        OWNER,
        REPO,
        PR,
        required=(*R, "pullNumber"),
    ),
    tool(
        "get_file_contents",
        "Get the contents of a file or directory from a GitHub repository.",
        OWNER,
        REPO,
        ("path", "string", "Path to file/directory"),
        ("ref", "string", "Accepts optional git refs such as refs/tags/{tag}, refs/heads/{branch}"),
        required=R,
    ),
    tool(
        "create_or_update_file",
        "Create or update a single file in a GitHub repository. If updating, you "
        "must provide the SHA of the file you want to update.",
        OWNER,
        REPO,
        ("path", "string", "Path where to create/update the file"),
        ("content", "string", "Content of the file"),
        ("message", "string", "Commit message"),
        ("branch", "string", "Branch to create/update the file in"),
        ("sha", "string", "Blob SHA of the file being replaced"),
        required=(*R, "path", "content", "message", "branch"),
    ),
    tool(
        "delete_file",
        "Delete a file from a GitHub repository.",
        OWNER,
        REPO,
        ("path", "string", "Path to the file to delete"),
        ("message", "string", "Commit message"),
        ("branch", "string", "Branch to delete the file from"),
        required=(*R, "path", "message", "branch"),
    ),
    tool(
        "push_files",
        "Push multiple files to a GitHub repository in a single commit.",
        OWNER,
        REPO,
        ("branch", "string", "Branch to push to"),
        ("files", "array", "Array of file objects to push, each with path and content"),
        ("message", "string", "Commit message"),
        required=(*R, "branch", "files", "message"),
    ),
    tool(
        "create_branch",
        "Create a new branch in a GitHub repository.",
        OWNER,
        REPO,
        ("branch", "string", "Name for new branch"),
        ("from_branch", "string", "Source branch (defaults to repo default)"),
        required=(*R, "branch"),
    ),
    tool("list_branches", "List branches in a GitHub repository.", OWNER, REPO, PAGE, PER_PAGE, required=R),
    tool(
        "list_commits",
        "Get list of commits of a branch in a GitHub repository.",
        OWNER,
        REPO,
        ("sha", "string", "Commit SHA, branch or tag name to list commits of"),
        ("author", "string", "Author username or email address to filter commits by"),
        PAGE,
        PER_PAGE,
        required=R,
    ),
    tool(
        "get_commit",
        "Get details for a commit from a GitHub repository.",
        OWNER,
        REPO,
        ("sha", "string", "Commit SHA, branch name, or tag name"),
        required=(*R, "sha"),
    ),
    tool(
        "search_code",
        "Fast and precise code search across ALL GitHub repositories using GitHub's native "
        "search engine. Best for finding exact symbols, functions, classes, or specific code patterns.",
        ("query", "string", "Search query using GitHub's powerful code search syntax"),
        PAGE,
        PER_PAGE,
        required=("query",),
    ),
    tool(
        "search_repositories",
        "Find GitHub repositories by name, description, readme, topics, or other metadata.",
        ("query", "string", "Repository search query"),
        PAGE,
        PER_PAGE,
        required=("query",),
    ),
    tool(
        "search_users",
        "Find GitHub users by username, real name, or other profile information.",
        ("query", "string", "User search query"),
        PAGE,
        PER_PAGE,
        required=("query",),
    ),
    tool(
        "create_repository",
        "Create a new GitHub repository in your account or specified organization.",
        ("name", "string", "Repository name"),
        ("description", "string", "Repository description"),
        ("private", "boolean", "Whether repo should be private"),
        ("organization", "string", "Organization to create the repository in"),
        required=("name",),
    ),
    tool(
        "fork_repository",
        "Fork a GitHub repository to your account or specified organization.",
        OWNER,
        REPO,
        ("organization", "string", "Organization to fork to"),
        required=R,
    ),
    tool("list_tags", "List git tags in a GitHub repository.", OWNER, REPO, PAGE, PER_PAGE, required=R),
    tool("list_releases", "List releases in a GitHub repository.", OWNER, REPO, PAGE, PER_PAGE, required=R),
    tool("get_latest_release", "Get the latest release in a GitHub repository.", OWNER, REPO, required=R),
    tool(
        "list_workflow_runs",
        "List workflow runs for a specific workflow (GitHub Actions).",
        OWNER,
        REPO,
        ("workflow_id", "string", "The workflow ID or workflow file name"),
        ("status", "string", "Filter by run status"),
        required=(*R, "workflow_id"),
    ),
    tool(
        "get_job_logs",
        "Download logs for a specific workflow job or efficiently get all failed job logs for "
        "a workflow run.",
        OWNER,
        REPO,
        ("job_id", "number", "The unique identifier of the workflow job"),
        ("run_id", "number", "Workflow run ID (required when using failed_only)"),
        ("failed_only", "boolean", "When true, gets logs for all failed jobs in run_id"),
        required=R,
    ),
    tool(
        "rerun_failed_jobs",
        "Re-run only the failed jobs in a workflow run.",
        OWNER,
        REPO,
        ("run_id", "number", "The unique identifier of the workflow run"),
        required=(*R, "run_id"),
    ),
    tool(
        "list_code_scanning_alerts",
        "List code scanning alerts in a GitHub repository.",
        OWNER,
        REPO,
        ("severity", "string", "Filter code scanning alerts by severity"),
        ("state", "string", "Filter code scanning alerts by state"),
        required=R,
    ),
    tool(
        "list_dependabot_alerts",
        "List dependabot alerts in a GitHub repository.",
        OWNER,
        REPO,
        ("severity", "string", "Filter dependabot alerts by severity"),
        required=R,
    ),
    tool(
        "list_notifications",
        "Lists all GitHub notifications for the authenticated user, including unread "
        "notifications, mentions, review requests, assignments, and updates on issues or pull requests.",
        (
            "filter",
            "string",
            "Filter notifications to default, include_read_notifications or only_participating",
        ),
        PAGE,
        PER_PAGE,
    ),
    tool(
        "get_me",
        "Get details of the authenticated GitHub user. Use this when a request is about the user's "
        "own profile for GitHub.",
    ),
    tool(
        "create_gist",
        "Create a new gist.",
        ("description", "string", "Description of the gist"),
        ("filename", "string", "Filename for simple single-file gist creation"),
        ("content", "string", "Content for simple single-file gist creation"),
        ("public", "boolean", "Whether the gist is public"),
        required=("filename", "content"),
    ),
]

CHANNEL: Arg = ("channel_id", "string", "The ID of the channel")
SLACK = [
    tool(
        "slack_list_channels",
        "List public or pre-defined channels in the workspace with pagination.",
        ("limit", "number", "Maximum number of channels to return (default 100, max 200)"),
        ("cursor", "string", "Pagination cursor for next page of results"),
    ),
    tool(
        "slack_post_message",
        "Post a new message to a Slack channel.",
        CHANNEL,
        ("text", "string", "The message text to post"),
        required=("channel_id", "text"),
    ),
    tool(
        "slack_reply_to_thread",
        "Reply to a specific message thread in Slack.",
        CHANNEL,
        ("thread_ts", "string", "The timestamp of the parent message in the format '1234567890.123456'"),
        ("text", "string", "The reply text"),
        required=("channel_id", "thread_ts", "text"),
    ),
    tool(
        "slack_add_reaction",
        "Add a reaction emoji to a message.",
        CHANNEL,
        ("timestamp", "string", "The timestamp of the message to react to"),
        ("reaction", "string", "The name of the emoji reaction (without ::)"),
        required=("channel_id", "timestamp", "reaction"),
    ),
    tool(
        "slack_get_channel_history",
        "Get recent messages from a channel.",
        CHANNEL,
        ("limit", "number", "Number of messages to retrieve (default 10)"),
        required=("channel_id",),
    ),
    tool(
        "slack_get_thread_replies",
        "Get all replies in a message thread.",
        CHANNEL,
        ("thread_ts", "string", "The timestamp of the parent message"),
        required=("channel_id", "thread_ts"),
    ),
    tool(
        "slack_get_users",
        "Get a list of all users in the workspace with their basic profile information.",
        ("cursor", "string", "Pagination cursor for next page of results"),
        ("limit", "number", "Maximum number of users to return"),
    ),
    tool(
        "slack_get_user_profile",
        "Get detailed profile information for a specific user.",
        ("user_id", "string", "The ID of the user"),
        required=("user_id",),
    ),
    tool(
        "slack_search_messages",
        "Search messages across the workspace with a query, optionally in one channel or from one user.",
        ("query", "string", "Search text"),
        ("in_channel", "string", "Channel to search in"),
        ("from_user", "string", "Only messages from this user"),
        required=("query",),
    ),
    tool(
        "slack_create_channel",
        "Create a new public or private channel.",
        ("name", "string", "Channel name"),
        ("is_private", "boolean", "Create a private channel"),
        required=("name",),
    ),
    tool(
        "slack_set_channel_topic",
        "Set the topic of a channel.",
        CHANNEL,
        ("topic", "string", "The new topic"),
        required=("channel_id", "topic"),
    ),
    tool(
        "slack_upload_file",
        "Upload a file and share it in a channel.",
        CHANNEL,
        ("filename", "string", "Name of the file"),
        ("content", "string", "File contents"),
        ("initial_comment", "string", "Message text introducing the file"),
        required=("channel_id", "filename"),
    ),
]

POSTGRES = [
    tool(
        "query",
        "Run a read-only SQL query against the database.",
        ("sql", "string", "The SQL query to run"),
        required=("sql",),
    ),
    tool(
        "execute_sql",
        "Execute any SQL statement, including INSERT, UPDATE, DELETE and DDL, in a transaction.",
        ("sql", "string", "The SQL statement"),
        required=("sql",),
    ),
    tool("list_schemas", "List all schemas in the database."),
    tool(
        "list_tables",
        "List the tables of a schema with their row estimates.",
        ("schema", "string", "Schema name (default public)"),
    ),
    tool(
        "describe_table",
        "Show the columns, types, constraints and indexes of a table.",
        ("schema", "string", "Schema name"),
        ("table", "string", "Table name"),
        required=("table",),
    ),
    tool(
        "explain_query",
        "Explain the execution plan of a SQL query, optionally with ANALYZE.",
        ("sql", "string", "The query to explain"),
        ("analyze", "boolean", "Run it and show actual timings"),
        required=("sql",),
    ),
    tool(
        "get_top_queries",
        "Report the slowest or most resource-intensive queries from pg_stat_statements.",
        ("sort_by", "string", "total_time or mean_time"),
        ("limit", "number", "How many queries"),
    ),
    tool(
        "analyze_db_health",
        "Check database health: index bloat, vacuum status, connection counts, "
        "replication lag and buffer cache hit rate.",
    ),
]

DRIVE = [
    tool(
        "gdrive_search",
        "Search for files in Google Drive by name or full text.",
        ("query", "string", "Search query"),
        ("pageToken", "string", "Token for the next page of results"),
        ("pageSize", "number", "Number of results per page (max 100)"),
        required=("query",),
    ),
    tool(
        "gdrive_read_file",
        "Read the contents of a file from Google Drive; Google Docs are exported as Markdown, Sheets as CSV.",
        ("fileId", "string", "ID of the file to read"),
        required=("fileId",),
    ),
    tool(
        "gdrive_create_folder",
        "Create a new folder in Google Drive.",
        ("name", "string", "Folder name"),
        ("parentId", "string", "ID of the parent folder"),
        required=("name",),
    ),
    tool(
        "gdrive_share_file",
        "Share a Drive file with a user or group, as reader, commenter or writer.",
        ("fileId", "string", "ID of the file"),
        ("email", "string", "Email address to share with"),
        ("role", "string", "reader, commenter or writer"),
        required=("fileId", "email", "role"),
    ),
    tool(
        "gsheets_read",
        "Read a range of cells from a Google Sheets spreadsheet.",
        ("spreadsheetId", "string", "The ID of the spreadsheet"),
        ("range", "string", "A1 notation range"),
        required=("spreadsheetId",),
    ),
    tool(
        "gsheets_update_cell",
        "Update the value of a cell in a Google Sheets spreadsheet.",
        ("fileId", "string", "ID of the spreadsheet"),
        ("range", "string", "Cell in A1 notation"),
        ("value", "string", "New cell value"),
        required=("fileId", "range", "value"),
    ),
]

NS: Arg = ("namespace", "string", "Kubernetes namespace (default: default)")
KUBERNETES = [
    tool(
        "pods_list",
        "List all the Kubernetes pods in the current cluster, in all namespaces or one.",
        NS,
        ("labelSelector", "string", "Kubernetes label selector to filter pods"),
    ),
    tool(
        "pods_get",
        "Get a Kubernetes pod in the current or provided namespace with the provided name.",
        NS,
        ("name", "string", "Name of the pod"),
        required=("name",),
    ),
    tool(
        "pods_delete",
        "Delete a Kubernetes pod in the current or provided namespace with the provided name.",
        NS,
        ("name", "string", "Name of the pod to delete"),
        required=("name",),
    ),
    tool(
        "pods_log",
        "Get the logs of a Kubernetes pod in the current or provided namespace.",
        NS,
        ("name", "string", "Name of the pod"),
        ("container", "string", "Name of the container"),
        ("tail", "number", "Number of lines from the end of the logs"),
        required=("name",),
    ),
    tool(
        "pods_exec",
        "Execute a command in a Kubernetes pod (shell access) in the current or provided namespace.",
        NS,
        ("name", "string", "Name of the pod"),
        ("command", "array", "Command to execute, e.g. ['ls', '-l']"),
        required=("name", "command"),
    ),
    tool(
        "pods_top",
        "List the resource consumption (CPU and memory) of pods as recorded by the metrics server.",
        NS,
        ("name", "string", "Name of a pod"),
    ),
    tool(
        "deployments_scale",
        "Scale a Kubernetes deployment to a number of replicas.",
        NS,
        ("name", "string", "Deployment name"),
        ("replicas", "number", "Desired number of replicas"),
        required=("name", "replicas"),
    ),
    tool(
        "deployments_restart",
        "Restart a deployment by rolling out new pods.",
        NS,
        ("name", "string", "Deployment name"),
        required=("name",),
    ),
    tool(
        "resources_create_or_update",
        "Create or update a Kubernetes resource from a YAML or JSON manifest.",
        ("resource", "string", "The manifest of the resource"),
        required=("resource",),
    ),
    tool(
        "resources_list",
        "List Kubernetes resources of any kind (apiVersion and kind), e.g. services, ingresses, configmaps.",
        ("apiVersion", "string", "apiVersion of the resources"),
        ("kind", "string", "kind of the resources"),
        NS,
        required=("apiVersion", "kind"),
    ),
    tool(
        "events_list", "List all the Kubernetes events (warnings, errors, state changes) in the cluster.", NS
    ),
    tool("namespaces_list", "List all the Kubernetes namespaces in the current cluster."),
    tool(
        "helm_install",
        "Install a Helm chart in the current or provided namespace.",
        ("chart", "string", "Chart reference to install"),
        ("values", "object", "Values to pass to the chart"),
        ("name", "string", "Name of the release"),
        NS,
        required=("chart",),
    ),
]

SENTRY = [
    tool("find_organizations", "Find organizations that the user has access to in Sentry."),
    tool(
        "find_projects",
        "Find projects in Sentry.",
        ("organizationSlug", "string", "The organization's slug"),
        required=("organizationSlug",),
    ),
    tool(
        "search_events",
        "Search Sentry events (errors, logs, spans) with a natural-language query and get counts or lists.",
        ("organizationSlug", "string", "The organization's slug"),
        ("naturalLanguageQuery", "string", "What to search for"),
        required=("organizationSlug",),
    ),
    tool(
        "get_issue_details",
        "Get detailed information about a specific Sentry issue, with its stack trace.",
        ("issueId", "string", "The issue ID, e.g. PROJECT-1Z43"),
        ("issueUrl", "string", "The URL of the issue"),
    ),
    tool(
        "update_issue_status",
        "Resolve, ignore or reopen a Sentry issue, or assign it.",
        ("issueId", "string", "The issue ID"),
        ("status", "string", "resolved, resolvedInNextRelease, unresolved or ignored"),
        ("assignedTo", "string", "User or team to assign"),
    ),
    tool(
        "find_releases",
        "Find releases in Sentry, e.g. the latest deployed version.",
        ("organizationSlug", "string", "The organization's slug"),
        ("projectSlug", "string", "Project"),
    ),
    tool(
        "analyze_issue_with_seer",
        "Use Seer AI to analyze a production error and find its root cause, with specific code fixes.",
        ("issueId", "string", "The issue ID"),
    ),
]

CATALOGS = {
    "github": GITHUB,
    "slack": SLACK,
    "postgres": POSTGRES,
    "gdrive": DRIVE,
    "kubernetes": KUBERNETES,
    "sentry": SENTRY,
}
SOURCE = (
    "hand-written for this benchmark (benchmarks/discovery/handwritten.py), modelled on public {} MCP servers"
)


def main() -> None:
    for name, tools in CATALOGS.items():
        document = {"source": SOURCE.format(name), "tools": tools}
        (OUT / f"{name}.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(tools)} tools")


if __name__ == "__main__":
    main()
