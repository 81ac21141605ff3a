#pragma once
// The programs the Python tests run, one function each, all in one binary (wanfw_test_tools TOOL
// ARGS...; main.cpp): the four compile as one unit instead of four. Each takes the command line
// from the tool's name on (argv[0] is "safetensors", ...) and returns the process's exit code.

int collectives_tool(int argc, char** argv);
int safetensors_tool(int argc, char** argv);
int ulysses_tool(int argc, char** argv);
int vae_tool(int argc, char** argv);
