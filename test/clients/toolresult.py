"""What the MCP client scripts read of a tool result. The official mcp client and
fastmcp's both give results with content blocks and structured_content."""
import json


def text_of(res):
    """The text of a tool result's content blocks."""
    return "".join(getattr(c, "text", "") for c in res.content)


def result(res):
    """A tool result's structured content, else its text parsed as JSON."""
    if res.structured_content is not None:
        return res.structured_content
    try:
        return json.loads(text_of(res))
    except ValueError:
        return None
