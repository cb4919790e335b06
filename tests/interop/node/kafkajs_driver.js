// kafkajs driver for the interop suite: the same command line and JSON lines as tests/interop/drivers/common.py.
// kafkajs is eager-only (no cooperative protocol), has no static membership (no groupInstanceId) and ships
// one assigner, RoundRobinAssigner (protocol name "RoundRobinAssigner"); `--protocol-name roundrobin` renames
// it so that it can share a group with clients whose round-robin assignor is called "roundrobin".
// Rebalances: REBALANCING (kafkajs drops its whole assignment, eager) and GROUP_JOIN (the new assignment).
'use strict'
const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')
const kafkajsVersion = require('kafkajs/package.json').version
const { parseArgs, emit } = require('./driver_common.js')

const args = parseArgs(process.argv, {
  group: 'interop', role: 'consumer', assignor: 'roundrobin', sessionTimeoutMs: 6000,
  heartbeatIntervalMs: 300, rebalanceTimeoutMs: 10000, count: 100, protocolName: null, clientId: 'kafkajs'
})
const logCreator = () => ({ namespace, level, label, log }) => {
  process.stderr.write(`${label} [${namespace}] ${log.message} ${JSON.stringify(log)}\n`)
}
const kafka = new Kafka({
  clientId: args.clientId,
  brokers: [args.bootstrap],
  logLevel: args.debug ? logLevel.DEBUG : logLevel.WARN,
  logCreator,
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 }
})

async function produce () {
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < args.count; i++) messages.push({ value: `v${i}` })
  await producer.send({ topic: args.topic, messages })
  await producer.disconnect()
  emit('produced', { count: args.count })
}

async function consume () {
  if (args.assignor !== 'roundrobin') throw new Error(`kafkajs has no ${args.assignor} assigner`)
  if (args.instanceId) throw new Error('kafkajs has no static membership (group.instance.id)')
  let assigner = PartitionAssigners.roundRobin
  if (args.protocolName) {
    const name = args.protocolName
    assigner = (config) => ({ ...PartitionAssigners.roundRobin(config), name })
  }
  const consumer = kafka.consumer({
    groupId: args.group,
    sessionTimeout: args.sessionTimeoutMs,
    rebalanceTimeout: args.rebalanceTimeoutMs,
    heartbeatInterval: args.heartbeatIntervalMs,
    partitionAssigners: [assigner],
    metadataMaxAge: 5000,
    maxWaitTimeInMs: 100
  })
  let owned = []
  const { GROUP_JOIN, REBALANCING, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(REBALANCING, () => {
    if (owned.length) emit('revoked', { partitions: owned, owned: [] })
    owned = []
  })
  consumer.on(GROUP_JOIN, (e) => {
    const mine = (e.payload.memberAssignment[args.topic] || []).slice().sort((a, b) => a - b)
    const added = mine.filter((p) => !owned.includes(p))
    const removed = owned.filter((p) => !mine.includes(p))
    if (removed.length) emit('revoked', { partitions: removed, owned: owned.filter((p) => mine.includes(p)) })
    owned = mine
    emit('assigned', { partitions: added, owned, member_id: e.payload.memberId })
  })
  consumer.on(COMMIT_OFFSETS, (e) => {
    const offsets = {}
    for (const t of e.payload.topics) for (const p of t.partitions) offsets[String(p.partition)] = Number(p.offset)
    emit('committed', { offsets })
  })
  consumer.on(CRASH, (e) => emit('error', { error: String(e.payload.error), restart: e.payload.restart }))

  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await consumer.disconnect() // LeaveGroup
    emit('exit')
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)

  await consumer.connect()
  await consumer.subscribe({ topics: [args.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: true, // commits the resolved offsets after each processed batch
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      const recs = batch.messages.map((m) => [batch.partition, Number(m.offset)])
      for (const m of batch.messages) resolveOffset(m.offset)
      if (recs.length) emit('records', { recs })
      await heartbeat()
    }
  })
}

emit('start', { client: 'kafkajs', version: kafkajsVersion })
const main = args.role === 'producer' ? produce : consume
main().catch((e) => {
  emit('error', { error: String(e && e.stack ? e.stack : e) })
  process.exit(1)
})
