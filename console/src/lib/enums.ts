export const ROUTE_STRATEGIES = [
  "FIRST", "LAST", "ROUND", "RANDOM", "CONSISTENT_HASH", "LEAST_FREQUENTLY_USED", "LEAST_RECENTLY_USED",
  "FAILOVER", "BUSYOVER", "SHARDING_BROADCAST",
] as const;
export const GLUE_TYPES = [
  "BEAN", "GLUE_GROOVY", "GLUE_SHELL", "GLUE_PYTHON", "GLUE_PHP", "GLUE_NODEJS", "GLUE_POWERSHELL",
] as const;
export const BLOCK_STRATEGIES = ["SERIAL_EXECUTION", "DISCARD_LATER", "COVER_EARLY"] as const;
export const MISFIRE_STRATEGIES = ["DO_NOTHING", "FIRE_ONCE_NOW"] as const;
export const SCHEDULE_TYPES = ["NONE", "CRON", "FIX_RATE"] as const;

export type GlueType = (typeof GLUE_TYPES)[number];

/** A starting source for a new GLUE job of each type. */
export const GLUE_TEMPLATES: Record<GlueType, string> = {
  BEAN: "",
  GLUE_GROOVY: "// Groovy is run by Java executors only\n",
  GLUE_SHELL: '#!/bin/bash\necho "jobring job: $1"\nexit 0\n',
  GLUE_PYTHON: "import sys\n\nprint('jobring job params:', sys.argv[1:])\n",
  GLUE_PHP: "<?php\necho \"jobring job\\n\";\n",
  GLUE_NODEJS: "console.log('jobring job', process.argv.slice(2));\n",
  GLUE_POWERSHELL: 'Write-Output "jobring job"\n',
};
