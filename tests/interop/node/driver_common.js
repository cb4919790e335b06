// The command line and the JSON-lines report shared by the Node drivers, as tests/interop/drivers/common.py
// defines them: `--some-flag value` pairs become camelCase keys over the driver's defaults; every report is
// one JSON object per line with `t` (seconds) and `ev`.
'use strict'

function parseArgs (argv, defaults) {
  const args = { ...defaults }
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase())
    const value = argv[i + 1]
    args[key] = /^\d+$/.test(value) ? Number(value) : value
  }
  return args
}

function emit (ev, fields = {}) {
  process.stdout.write(JSON.stringify({ t: Date.now() / 1000, ev, ...fields }) + '\n')
}

module.exports = { parseArgs, emit }
