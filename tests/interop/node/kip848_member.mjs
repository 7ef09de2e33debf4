// One KIP-848 group member (@platformatic/kafka, groupProtocol 'consumer') for test_groups_node.py.
//
//   node kip848_member.mjs BOOTSTRAP GROUP TOPIC CLIENT_ID [MAX_SECONDS]
//
// Prints one JSON object per line on stdout:
//   {"event":"joined","memberId":...}            once the member has an ID
//   {"event":"assignment","partitions":[...]}   whenever its assignment (of TOPIC) changes
//   {"event":"message","partition":P,"offset":O,"value":"..."}
//   {"event":"closed"}                           after leaving the group
// Every object also has "t", the wall-clock time in seconds.
// Reading "stop" (or EOF) on stdin makes it leave the group (consumer.close()) and exit 0. It also
// stops by itself after MAX_SECONDS (default 60) with exit code 3, so it can never hang a test.
import { Consumer } from '@platformatic/kafka'
import { createInterface } from 'node:readline'

const [bootstrap, groupId, topic, clientId, maxSeconds = '60'] = process.argv.slice(2)
const out = obj => process.stdout.write(JSON.stringify({ ...obj, t: Date.now() / 1000 }) + '\n')

const consumer = new Consumer({
  groupId,
  clientId,
  bootstrapBrokers: [bootstrap],
  groupProtocol: 'consumer',
  sessionTimeout: 6000,
  heartbeatInterval: 500,
  timeout: 10000,
  retries: 10,
  retryDelay: 200
})

let stopping = false
async function stop (code) {
  if (stopping) return
  stopping = true
  clearInterval(watch)
  clearTimeout(deadline)
  try {
    await stream.close()
    await consumer.close()
    out({ event: 'closed' })
  } catch (err) {
    process.stderr.write(`close failed: ${err?.stack ?? err}\n`)
    code = code || 2
  }
  process.exit(code)
}

const deadline = setTimeout(() => {
  process.stderr.write(`no stop after ${maxSeconds}s, exiting\n`)
  stop(3)
}, Number(maxSeconds) * 1000)

consumer.on('error', err => process.stderr.write(`consumer error: ${err?.stack ?? err}\n`))

const stream = await consumer.consume({
  topics: [topic],
  mode: 'committed',
  fallbackMode: 'earliest',
  autocommit: true,
  sessionTimeout: 6000,
  heartbeatInterval: 500,
  maxWaitTime: 200
})
stream.on('error', err => process.stderr.write(`stream error: ${err?.stack ?? err}\n`))
stream.on('data', m => {
  out({ event: 'message', partition: m.partition, offset: Number(m.offset), value: m.value.toString() })
})

let lastMember = null
let lastParts = null
const watch = setInterval(() => {
  if (consumer.memberId && consumer.memberId !== lastMember) {
    lastMember = consumer.memberId
    out({ event: 'joined', memberId: lastMember })
  }
  const parts = (consumer.assignments ?? [])
    .filter(a => a.topic === topic)
    .flatMap(a => a.partitions)
    .sort((a, b) => a - b)
  const key = JSON.stringify(parts)
  if (key !== lastParts) {
    lastParts = key
    out({ event: 'assignment', partitions: parts })
  }
}, 50)

const rl = createInterface({ input: process.stdin })
rl.on('line', line => { if (line.trim() === 'stop') stop(0) })
rl.on('close', () => stop(0))
