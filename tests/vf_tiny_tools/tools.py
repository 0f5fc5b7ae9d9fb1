"""The taskset's MCP tool server: verifiers runs it as ``python -m vf_tiny_tools.tools`` (its class's module)."""

import verifiers.v1 as vf


class Calculator(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the tool is "add", not "calculator_add"

    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b


if __name__ == "__main__":
    Calculator.run()
