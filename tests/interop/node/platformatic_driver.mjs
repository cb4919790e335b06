// @platformatic/kafka driver for the interop suite: the same command line and JSON lines as
// tests/interop/drivers/common.py. Classic group protocol (its KIP-848 consumer is left to the KIP-848 issue).
// It ships one assigner, roundRobinAssigner, under the protocol name "roundrobin"; it negotiates API versions
// (ApiVersions) and supports static membership (groupInstanceId). It has no rebalance callbacks: it emits
// 'consumer:group:rebalance' when the coordinator says a rebalance is in progress (eager: the assignment is
// void from then on) and 'consumer:group:join' with the new assignment once SyncGroup answered.
import { readFileSync } from 'node:fs'
import { inspect } from 'node:util'
import { Consumer, Producer } from '@platformatic/kafka'
import common from './driver_common.js'

// The package's exports map hides its package.json: read it from node_modules.
const version = JSON.parse(readFileSync(new URL('./node_modules/@platformatic/kafka/package.json', import.meta.url))).version

const { parseArgs, emit } = common
const args = parseArgs(process.argv, {
  group: 'interop', role: 'consumer', assignor: 'roundrobin', sessionTimeoutMs: 6000,
  heartbeatIntervalMs: 300, rebalanceTimeoutMs: 10000, count: 100, clientId: 'platformatic'
})
const base = { clientId: args.clientId, bootstrapBrokers: [args.bootstrap], retries: 30, retryDelay: 200, metadataMaxAge: 5000 }

async function produce () {
  const producer = new Producer(base)
  const messages = []
  for (let i = 0; i < args.count; i++) messages.push({ topic: args.topic, value: Buffer.from(`v${i}`) })
  await producer.send({ messages })
  await producer.close()
  emit('produced', { count: args.count })
}

async function consume () {
  if (args.assignor !== 'roundrobin') throw new Error(`@platformatic/kafka has no ${args.assignor} assigner`)
  const consumer = new Consumer({
    ...base,
    groupId: args.group,
    groupInstanceId: args.instanceId,
    sessionTimeout: args.sessionTimeoutMs,
    // It refuses a rebalance timeout below the session timeout (consumer.js #validateGroupOptions), as librdkafka does.
    rebalanceTimeout: Math.max(args.rebalanceTimeoutMs, args.sessionTimeoutMs),
    heartbeatInterval: args.heartbeatIntervalMs,
    // Its default subscription says version 1 but is written in the v0 layout (no OwnedPartitions, KIP-429),
    // which a leader that parses v1 (librdkafka, kafka-python) cannot read: declare the layout it writes.
    protocols: [{ name: 'roundrobin', version: 0 }],
    maxWaitTime: 100,
    autocommit: false
  })
  let owned = []
  const revokeAll = () => {
    if (owned.length) emit('revoked', { partitions: owned, owned: [] })
    owned = []
  }
  consumer.on('consumer:group:rebalance', revokeAll)
  consumer.on('consumer:group:join', (e) => {
    const mine = ((e.assignments || []).find((a) => a.topic === args.topic)?.partitions || []).slice().sort((a, b) => a - b)
    const added = mine.filter((p) => !owned.includes(p))
    const removed = owned.filter((p) => !mine.includes(p))
    if (removed.length) emit('revoked', { partitions: removed, owned: owned.filter((p) => mine.includes(p)) })
    owned = mine
    emit('assigned', { partitions: added, owned, member_id: e.memberId, generation: e.generationId })
  })
  consumer.on('consumer:heartbeat:error', (e) => process.stderr.write(`heartbeat error: ${e?.error}\n`))
  consumer.on('error', (e) => emit('poll_error', { error: String(e) }))

  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await consumer.close(true) // closes the stream, then LeaveGroup (a static member's leave keeps its id)
    emit('exit')
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)

  const stream = await consumer.consume({ topics: [args.topic], mode: 'committed', fallbackMode: 'earliest' })
  stream.on('error', (e) => emit('poll_error', { error: inspect(e, { depth: 5 }).slice(0, 4000) }))
  for await (const message of stream) {
    emit('records', { recs: [[message.partition, Number(message.offset)]] })
    await message.commit()
  }
}

emit('start', { client: '@platformatic/kafka', version })
const main = args.role === 'producer' ? produce : consume
main().catch((e) => {
  emit('error', { error: String(e && e.stack ? e.stack : e) })
  process.exit(1)
})
